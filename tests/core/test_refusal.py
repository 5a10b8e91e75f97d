"""
Classifying refused chained requests, over the error bodies real servers send.

Each case is a recorded HTTP answer (status, body) replayed through the real
openai client on a mock transport, so the exception classified is exactly what
the SDK raises for it (on openai 2.x and 3.x alike).
docs/compatibility.md says where each body comes from.
"""

from __future__ import annotations

import base64
import importlib
import json
from typing import Any

import openai
import pytest

from anchortrack._plan import Reason
from anchortrack._refusal import classify
from anchortrack.server import http_client_classes


ANCHOR = "resp_0a1b2c3d4e5f"
LLAMA_HINT = "Use 'client.responses.list()' to list available Responses."
OTHER_ID = "resp_99999999"
STALE, ZDR, OTHER = Reason.STALE_ANCHOR, Reason.ZDR, None


def _httpx() -> Any:
    """The HTTP module the installed openai client is built on (httpx or httpx2)."""
    return importlib.import_module("httpx2" if int(openai.__version__.split(".")[0]) >= 3 else "httpx")


def _raised(status: int, body: object, *, stream: bool = False, sse: bool = False) -> BaseException:
    """What the openai client raises when a chained create gets this answer."""
    httpx = _httpx()

    def answer(request: Any) -> Any:
        if sse:
            text = f"data: {json.dumps(body)}\n\n"
            return httpx.Response(status, text=text, headers={"content-type": "text/event-stream"})
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    sync, _ = http_client_classes()
    client = openai.OpenAI(
        base_url="http://127.0.0.1:1/v1",
        api_key="test",
        max_retries=0,
        http_client=sync(transport=httpx.MockTransport(answer)),
    )
    try:
        with pytest.raises(openai.APIError) as raised:
            _create(client, stream=stream)
        return raised.value
    finally:
        client.close()


def _create(client: openai.OpenAI, *, stream: bool) -> None:
    """One chained create, reading a stream to its end."""
    if not stream:
        client.responses.create(model="m", input="two", previous_response_id=ANCHOR)
        return
    for _ in client.responses.create(model="m", input="two", previous_response_id=ANCHOR, stream=True):
        pass


def _openai_error(
    message: str, type_: str | None, param: str | None, code: str | int | None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _litellm_id(inner: str) -> str:
    """A LiteLLM proxy's managed response id wrapping the upstream's *inner* id."""
    raw = f"litellm:custom_llm_provider:openai;model_id:deploy-1;response_id:{inner}"
    return "resp_" + base64.b64encode(raw.encode()).decode()


#: (case, status, body, expected) — bodies as each server sends them for a request chained to ANCHOR.
HTTP_CASES = [
    # OpenAI, and Azure OpenAI (the same body): unknown, expired, deleted or store=false parent.
    (
        "openai-not-found",
        400,
        _openai_error(
            f"Previous response with id '{ANCHOR}' not found.",
            "invalid_request_error",
            "previous_response_id",
            "previous_response_not_found",
        ),
        STALE,
    ),
    (
        "openai-zdr",
        400,
        _openai_error(
            "Previous response cannot be used for this organization due to Zero Data Retention.",
            "invalid_request_error",
            "previous_response_id",
            "unsupported_parameter",
        ),
        ZDR,
    ),
    (
        "openai-malformed-id",
        400,
        _openai_error(
            "Invalid 'previous_response_id': '@x'. Expected an ID that contains letters, numbers, "
            "underscores, or dashes, but this value contained additional characters.",
            "invalid_request_error",
            "previous_response_id",
            "invalid_value",
        ),
        STALE,
    ),
    (
        "codex-backend",
        400,
        _openai_error(
            "Invalid `previous_response_id`.", "invalid_request_error", None, "invalid_request_error"
        ),
        STALE,
    ),
    # agentic-api 0.9.0: no param, its own code; the message names the id.
    (
        "agentic-api-not-found",
        404,
        _openai_error(
            f"storage error: not found: Response with id '{ANCHOR}'", "not_found", None, "not_found"
        ),
        STALE,
    ),
    # llama-stack: FastAPI's {"detail": …}, no error object.
    (
        "llama-stack-not-found",
        404,
        {"detail": f"Response '{ANCHOR}' not found. {LLAMA_HINT}"},
        STALE,
    ),
    (
        "llama-stack-background-unfinished",
        400,
        {
            "detail": f"Response {ANCHOR} is still in_progress. "
            "Cannot use an incomplete background response as previous_response_id."
        },
        STALE,
    ),
    # anchortrack serve: OpenAI's body.
    (
        "anchortrack-serve",
        400,
        _openai_error(
            f"Previous response with id '{ANCHOR}' not found.",
            "invalid_request_error",
            "previous_response_id",
            "previous_response_not_found",
        ),
        STALE,
    ),
    # LiteLLM proxy 1.108.7, default (encrypted) ids: the upstream's body inside its message, code "400",
    # no param; the id named is the upstream's, which the client's encrypted id does not reveal.
    (
        "litellm-encrypted-ids",
        400,
        _openai_error(
            "litellm.BadRequestError: OpenAIException - "
            + json.dumps(
                _openai_error(
                    f"Previous response with id '{OTHER_ID}' not found.",
                    "invalid_request_error",
                    "previous_response_id",
                    "previous_response_not_found",
                )
            )
            + "\n\nLiteLLM: model group 'scripted' failed with the error above. No fallback was attempted.",
            None,
            None,
            "400",
        ),
        STALE,
    ),
    (  # OpenAI's wording alone, its code dropped by a gateway
        "openai-wording-rewrapped",
        404,
        _openai_error(f"Upstream said: Previous response with id '{OTHER_ID}' not found.", None, None, "404"),
        STALE,
    ),
    # ---- not stale ----
    (
        "openai-unknown-model",
        404,
        _openai_error(
            "The model `gpt-9` does not exist or you do not have access to it.",
            "invalid_request_error",
            None,
            "model_not_found",
        ),
        OTHER,
    ),
    (
        "llama-stack-unknown-model",
        404,
        {"detail": "Model 'gpt-9' not found. Use 'client.models.list()' to list available Models."},
        OTHER,
    ),
    (
        "agentic-api-other-response",
        404,
        _openai_error(
            f"storage error: not found: Response with id '{OTHER_ID}'", "not_found", None, "not_found"
        ),
        OTHER,
    ),
    (
        "id-prefix-is-not-the-id",
        404,
        _openai_error(f"Response with id '{ANCHOR}9' not found.", "not_found", None, "not_found"),
        OTHER,
    ),
    (
        "litellm-other-400",
        400,
        _openai_error(
            "litellm.BadRequestError: OpenAIException - "
            + json.dumps(
                _openai_error("No tool output found for function call call_1.", None, "input", None)
            ),
            None,
            None,
            "400",
        ),
        OTHER,
    ),
    (
        "openai-other-parameter",
        400,
        _openai_error(
            "No tool output found for function call call_1.", "invalid_request_error", "input", None
        ),
        OTHER,
    ),
    (  # the delta named an item the anchor's context holds: resent in full, the anchor kept
        "openai-duplicate-item",
        400,
        _openai_error(
            "Duplicate item found with id msg_1. Remove duplicate items from your input and try again.",
            "invalid_request_error",
            "input",
            None,
        ),
        Reason.DUPLICATE_ITEM,
    ),
    (
        "duplicate-item-words-in-a-404",
        404,
        _openai_error("Duplicate item found with id msg_1.", "invalid_request_error", "input", None),
        OTHER,
    ),
    (
        "server-error-naming-the-anchor",
        500,
        _openai_error(f"Failed to load response '{ANCHOR}'.", "server_error", None, None),
        OTHER,
    ),
    ("bad-gateway-text", 502, "upstream connect error", OTHER),
    (
        "rate-limited",
        429,
        _openai_error("Rate limit reached.", "requests", None, "rate_limit_exceeded"),
        OTHER,
    ),
    (
        "plain-text-404",
        404,
        "404 page not found",
        OTHER,
    ),
]


@pytest.mark.parametrize(
    ("status", "body", "expected"), [c[1:] for c in HTTP_CASES], ids=[c[0] for c in HTTP_CASES]
)
def test_http_refusals(status: int, body: object, expected: Reason | None) -> None:
    error = _raised(status, body)
    assert isinstance(error, openai.APIStatusError)
    assert expected is classify(error, ANCHOR)


def test_llama_stack_in_stream_error_event_is_stale() -> None:
    """HTTP 200, first event {"error": {…, "code": "404"}}: the SDK raises a bare APIError."""
    body = {
        "error": {
            "message": f"Response '{ANCHOR}' not found. {LLAMA_HINT}",
            "code": "404",
        }
    }
    error = _raised(200, body, stream=True, sse=True)
    assert not isinstance(error, openai.APIStatusError)
    assert STALE is classify(error, ANCHOR)


@pytest.mark.parametrize(
    ("error_object", "expected"),
    [
        ({"message": f"Response '{OTHER_ID}' not found.", "code": "404"}, OTHER),
        ({"message": "Internal server error: An unexpected error occurred.", "code": "500"}, OTHER),
        ({"message": f"Response '{ANCHOR}' could not be loaded.", "code": "500"}, OTHER),
        ({"message": f"Lost {ANCHOR}."}, OTHER),  # no status at all: not ours to guess
        (
            {
                "message": f"Previous response with id '{ANCHOR}' not found.",
                "code": "previous_response_not_found",
                "param": "previous_response_id",
            },
            STALE,
        ),
    ],
)
def test_other_in_stream_error_events(error_object: dict[str, Any], expected: Reason | None) -> None:
    error = _raised(200, {"error": error_object}, stream=True, sse=True)
    assert expected is classify(error, ANCHOR)


def test_agentic_api_refuses_before_the_stream_starts() -> None:
    """agentic-api answers a streamed request to a lost anchor with the same HTTP 404."""
    body = _openai_error(
        f"storage error: not found: Response with id '{ANCHOR}'", "not_found", None, "not_found"
    )
    error = _raised(404, body, stream=True)
    assert isinstance(error, openai.NotFoundError)
    assert STALE is classify(error, ANCHOR)


@pytest.mark.parametrize("status", [400, 404])
def test_litellm_proxy_names_the_upstream_id_it_decoded(status: int) -> None:
    """A LiteLLM proxy hands out resp_<base64(…;response_id:X)> and its errors name X."""
    inner = "resp_998bca5d44e22037"
    anchor = _litellm_id(inner)
    body = _openai_error(
        "litellm.BadRequestError: Hosted_vllmException - "
        + json.dumps(
            {
                "error": {
                    "message": f"Response with id '{inner}' not found.",
                    "type": "invalid_request_error",
                    "param": "response_id",
                    "code": 404,
                }
            }
        )
        + ". Received Model Group=m\nAvailable Model Group Fallbacks=None",
        None,
        None,
        str(status),
    )
    error = _raised(status, body)
    assert STALE is classify(error, anchor)
    assert OTHER is classify(error, _litellm_id("resp_somethingelse"))


def test_a_non_litellm_id_that_decodes_to_junk_is_only_matched_whole() -> None:
    body = _openai_error("Response with id 'abc' not found.", "not_found", None, "not_found")
    error = _raised(404, body)
    assert OTHER is classify(error, "resp_YWJj")  # base64 of "abc", but not LiteLLM's wrapping


def test_the_stale_wording_counts_only_in_a_refusal_status() -> None:
    body = _openai_error(f"Previous response with id '{ANCHOR}' not found.", None, None, None)
    assert OTHER is classify(_raised(500, body), ANCHOR)


def test_duck_typed_errors_still_work() -> None:
    """Anything with status_code/code/param/message attributes is classified the same way."""

    class Refusal(Exception):
        status_code = 404
        code = None
        param = None
        message = f"Response with id '{ANCHOR}' not found."
        body = None

    assert STALE is classify(Refusal(), ANCHOR)
    assert OTHER is classify(ValueError(ANCHOR), ANCHOR)
