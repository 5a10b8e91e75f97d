"""Errors in OpenAI's shape, raised by the pure parts of the server.

The constructors hold the exact messages the real API sends, so the server never spells one twice."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """A request the server refuses: the HTTP *status* and the fields of OpenAI's error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # OpenAI's field name
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.type, self.param, self.code = type, param, code

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI sends for this error."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def __repr__(self) -> str:
        return (
            f"APIError({self.status}, {self.message!r}, type={self.type!r}, "
            f"param={self.param!r}, code={self.code!r})"
        )


def bad_request(param: str | None, code: str | None, message: str) -> APIError:
    return APIError(400, message, param=param, code=code)


_JSON_TYPE_NAMES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),  # before int: a bool is an int
    (int, "an integer"),
    (float, "a decimal"),
    (str, "a string"),
    (list, "an array"),
    (dict, "an object"),
)


def json_type_name(value: object) -> str:
    """Name a JSON value's type the way OpenAI's validation messages do."""
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_TYPE_NAMES if isinstance(value, kind)), "an unknown type")


def invalid_json() -> APIError:
    message = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
    message += "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was "
    message += "not valid JSON. If you have trouble figuring out how to fix this, please contact us through "
    return APIError(400, message + "our help center at help.openai.com.)")


def invalid_type(param: str, expected: str, value: object) -> APIError:
    message = f"Invalid type for '{param}': expected {expected}, but got {json_type_name(value)} instead."
    return bad_request(param, "invalid_type", message)


def missing_parameter(param: str) -> APIError:
    return bad_request(param, "missing_required_parameter", f"Missing required parameter: '{param}'.")


def unknown_parameter(param: str) -> APIError:
    return bad_request(param, "unknown_parameter", f"Unknown parameter: '{param}'.")


def invalid_value(param: str, message: str) -> APIError:
    return bad_request(param, "invalid_value", message)


def unsupported(param: str, message: str) -> APIError:
    return bad_request(param, "unsupported_parameter", message)


def previous_response_not_found(response_id: str) -> APIError:
    message = f"Previous response with id '{response_id}' not found."
    return bad_request("previous_response_id", "previous_response_not_found", message)


def zero_data_retention() -> APIError:
    message = "Previous response cannot be used for this organization due to Zero Data Retention."
    return unsupported("previous_response_id", message)


def response_not_found(response_id: str) -> APIError:
    return APIError(404, f"Response with id '{response_id}' not found.")


def missing_api_key() -> APIError:
    message = "You didn't provide an API key. You need to provide your API key in an Authorization header "
    return APIError(401, message + "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")


def invalid_api_key(api_key: str) -> APIError:
    masked = f"{api_key[:3]}{'*' * max(len(api_key) - 7, 3)}{api_key[-4:]}" if len(api_key) > 8 else "***"
    return APIError(401, f"Incorrect API key provided: {masked}.", code="invalid_api_key")


#: What a client is told when its response could not be saved after the status line went out.
SAVE_FAILED = "The server could not save the response."


def error_event(code: str | None, message: str, param: str | None = None) -> dict[str, Any]:
    """The ``error`` event a stream ends with when it fails after its status line went out."""
    return {"type": "error", "code": code, "message": message, "param": param}


def server_error(message: str, status: int = 500, code: str | None = None) -> APIError:
    """A failure on the server's side: an internal one (500), or a model backend's (5xx, with a code)."""
    return APIError(status, message, type="server_error", code=code)


def save_failed() -> APIError:
    """Code ``server_error``, as the HTTP stream's error event says."""
    return server_error(SAVE_FAILED, code="server_error")
