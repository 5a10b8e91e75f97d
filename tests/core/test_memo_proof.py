"""
The fingerprint memo reuses a fingerprint only on a proof no user type can fool, and lets go of what
the caller dropped: its bytes are counted and bounded, and large texts are never copied.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import anchortrack
from anchortrack._canonical import canonical_item, dump_canonical
from anchortrack._hashing import Memo, fingerprint, fingerprint_history, fingerprint_items
from anchortrack.stores import MemoryStore
from tests._server import server_process

from ..helpers import assistant


def _fps(items: list[Any], memo: Memo, *, run: bool = True) -> list[bytes]:
    """Fingerprints through the memo: as a loop's planner asks for them (a whole history), or not (*run*)."""
    return (fingerprint_history(items, memo) if run else fingerprint_items(items, memo))[0]


class MaskedStr(str):
    """A log-masking string type: equal to every string, printed as a mask, one hash for all."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str)

    def __ne__(self, other: object) -> bool:
        return not isinstance(other, str)

    def __hash__(self) -> int:
        return 7

    def __repr__(self) -> str:
        return "'[masked]'"

    def __str__(self) -> str:
        return "[masked]"


class SameInt(int):
    """An int claiming to equal every number, printed as 1."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (int, float))

    def __hash__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return "1"


class SameFloat(float):
    """A float claiming to equal every number, printed as 1.0."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (int, float))

    def __hash__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return "1.0"


def test_a_lying_string_put_in_place_is_not_taken_for_the_old_text() -> None:
    """The edited item is fingerprinted by its new data, though its new text claims to equal the old."""
    memo = Memo()
    item: dict[str, Any] = {"role": "user", "content": [{"type": "input_text", "text": "card 4111"}]}
    first = _fps([item], memo)

    item["content"][0]["text"] = MaskedStr("card 4112")
    second = _fps([item], memo)

    assert first != second
    assert [fingerprint({"role": "user", "content": "card 4112"})] == second


def test_a_lying_key_is_not_taken_for_the_old_key() -> None:
    """A key of a str subclass that hashes and compares like any key does not pass for the old one."""
    memo = Memo()
    item: dict[str, Any] = {"type": "x", "a": "1"}
    first = _fps([item], memo)

    del item["a"]
    item[MaskedStr("b")] = "1"

    assert first != _fps([item], memo)
    assert [fingerprint({"type": "x", "b": "1"})] == _fps([item], memo)


def test_lying_numbers_are_not_taken_for_the_old_ones() -> None:
    """int/float subclasses equal to everything: fingerprinted by their data each time."""
    memo = Memo()
    item: dict[str, Any] = {"type": "x", "n": 1, "f": 1.0}
    first = _fps([item], memo)
    item["n"] = SameInt(2)
    item["f"] = SameFloat(2.5)

    assert first != _fps([item], memo)
    assert [fingerprint({"type": "x", "n": 2, "f": 2.5})] == _fps([item], memo)


def test_equal_copies_hit_the_value_memo_and_subclass_copies_do_not() -> None:
    """A new object of the same exact value reuses the fingerprint; one holding a subclass does not."""
    memo = Memo()
    item = {"type": "function_call_output", "call_id": "c1", "output": "x" * 100, "n": 1}
    _fps([item], memo)
    entries = len(memo._known)

    assert [fingerprint(item)] == _fps([dict(item)], memo)
    assert entries == len(memo._known)
    masked = {**item, "output": MaskedStr("y" * 100)}
    assert [fingerprint({**item, "output": "y" * 100})] == _fps([masked], memo)
    assert entries == len(memo._known)


def test_the_memo_is_bounded_by_bytes() -> None:
    """However many items pass, the counted bytes stay under the bound, and so does the real size."""
    memo = Memo(max_bytes=256 << 10)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(400):
            items = [{"role": "user", "content": f"{n}-{k} " + "z" * 2000} for k in range(10)]
            _fps(items, memo)
            del items
            assert memo.nbytes <= memo.max_bytes
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert held < 2 * memo.max_bytes
    assert memo._known  # it still remembers (the newest items)


def test_a_large_item_is_kept_by_identity_and_counted_never_by_value() -> None:
    """A large plain item: its text is shared with the caller (counted), never copied into the value table."""
    memo = Memo()
    big = {"role": "user", "content": [{"type": "input_image", "image_url": "data:," + "A" * 300_000}]}
    first = _fps([big], memo)

    assert not memo._known  # no value key: the item is proven by identity from now on
    assert 300_000 < memo.nbytes < 302_000  # its text is counted, not copied
    (entry,) = memo._seen.values()
    assert entry[3] is big["content"][0]["image_url"]
    assert first == _fps([big], memo)
    big["content"][0]["image_url"] += "B"
    assert [fingerprint(big)] == _fps([big], memo) != first


def _tool_call() -> Any:
    from openai.types.responses import ResponseFunctionToolCall

    return ResponseFunctionToolCall.model_validate(
        {
            "id": "fc_1",
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"q": "card 4111"}',
            "status": "completed",
        }
    )


def _edits() -> list[tuple[str, Any]]:
    """In-place edits of an SDK tool call, each of which changes what the SDK would send."""

    def arguments(m: Any) -> None:
        m.arguments = '{"q": "card 4112"}'

    def masked(m: Any) -> None:
        m.arguments = MaskedStr('{"q": "card 4112"}')

    def unset_name(m: Any) -> None:
        m.__pydantic_fields_set__.discard("name")

    def extra(m: Any) -> None:
        m.__pydantic_extra__["note"] = "added"

    def masked_key(m: Any) -> None:
        value = m.__dict__.pop("name")
        m.__dict__[MaskedStr("name")] = value + "2"

    def number(m: Any) -> None:
        m.__dict__["name"] = SameInt(2)

    def other_class(m: Any) -> None:
        class Sub(type(m)):  # type: ignore[misc]
            pass

        m.__class__ = Sub

    return [(f.__name__, f) for f in (arguments, masked, unset_name, extra, masked_key, number, other_class)]


@pytest.mark.parametrize(("name", "edit"), _edits(), ids=[name for name, _ in _edits()])
def test_an_sdk_tool_call_edited_in_place_is_fingerprinted_afresh(name: str, edit: Any) -> None:
    """A remembered tool call: any in-place edit, lying types included, is seen."""
    memo = Memo()
    model = _tool_call()
    first = _fps([model], memo)
    assert len(memo._known) == 1
    assert first == _fps([model], memo) == [fingerprint(model)]

    edit(model)
    try:
        expected = [fingerprint(model)]
    except Exception:
        with pytest.raises(Exception):  # noqa: B017, PT011
            _fps([model], memo)
        return
    if name != "other_class":  # the same data under another class: the same fingerprint
        assert expected != first
    assert _fps([model], memo) == expected


def test_an_sdk_model_with_nested_parts_is_remembered_by_value() -> None:
    """A message with content parts is remembered by its value; an edit of a part is seen."""
    from openai.types.responses import ResponseOutputMessage

    message = ResponseOutputMessage.model_validate(assistant("hi"))
    memo = Memo()
    first = _fps([message], memo)
    assert len(memo._known) == 1
    message.content[0].text = "bye"
    assert _fps([message], memo) == [fingerprint(message)] != first


# -- hypothesis: the memo agrees with a fresh fingerprint, whatever the item holds -------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.builds(MaskedStr, st.text(max_size=5))
    | st.builds(SameInt, st.integers(-3, 3))
    | st.builds(SameFloat, st.floats(allow_nan=False))
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@st.composite
def items(draw: st.DrawFn) -> dict[Any, Any]:
    """An item dict: JSON values (subclass scalars anywhere), at most one masked key (they all collide)."""
    out: dict[Any, Any] = draw(st.dictionaries(st.text(max_size=4), JSON, max_size=4))
    if draw(st.booleans()):
        key = draw(st.text(max_size=4))
        out.pop(key, None)
        out[MaskedStr(key)] = draw(JSON)
    return out


ITEMS = items()


def _plain(value: Any) -> Any:
    """The exact-typed data of *value* (what the wire carries)."""
    if isinstance(value, dict):
        return {str.__str__(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int.__int__(value)
    return float.__float__(value)


def _fresh(item: dict[Any, Any]) -> bytes | None:
    try:
        return fingerprint(_plain(item))
    except TypeError:  # the masked keys collapsed or mixed: no defined answer
        return None


@settings(max_examples=300, deadline=None)
@given(before=ITEMS, after=ITEMS, copies=st.booleans())
def test_memo_always_agrees_with_a_fresh_fingerprint(
    before: dict[Any, Any], after: dict[Any, Any], copies: bool
) -> None:
    """Whatever an item was and becomes in place (subclass scalars too), the memo gives the fresh value."""
    memo = Memo()
    item = dict(before)
    expected = _fresh(item)
    if expected is None or len(_plain(item)) != len(item):
        return
    assert [expected] == _fps([item], memo)
    item.clear()
    item.update(after)
    expected = _fresh(item)
    if expected is None or len(_plain(item)) != len(item):
        return

    assert [expected] == _fps([item], memo)
    if copies:
        assert [expected] == _fps([dict(item)], memo)


@settings(max_examples=100, deadline=None)
@given(history=st.lists(ITEMS, min_size=1, max_size=6), edits=st.lists(st.tuples(st.integers(0, 5), ITEMS)))
def test_memo_over_a_growing_history(
    history: list[dict[Any, Any]], edits: list[tuple[int, dict[Any, Any]]]
) -> None:
    """A loop passing the same objects again, editing some in place, always gets fresh fingerprints."""
    memo = Memo(max_bytes=4096)
    items = [dict(i) for i in history if len(_plain(i)) == len(i)]
    for index, value in edits:
        if not items:
            return
        target = items[index % len(items)]
        target.clear()
        target.update(value)
        if len(_plain(target)) != len(target):
            target.clear()
        expected = [_fresh(i) for i in items]
        if None in expected:
            return
        assert expected == _fps(items, memo)
        assert memo.nbytes <= memo.max_bytes


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("edit"), st.integers(0, 7), ITEMS),
        st.tuples(st.just("append"), ITEMS),
        st.tuples(st.just("insert"), st.integers(0, 7), ITEMS),
        st.tuples(st.just("delete"), st.integers(0, 7)),
        st.tuples(st.just("copy"), st.integers(0, 7)),
        st.tuples(st.just("call"), st.integers(0, 7), st.text(max_size=4)),
        st.tuples(st.just("mask"), st.integers(0, 7), st.text(max_size=4)),
    ),
    max_size=12,
)


def _call(n: int) -> Any:
    from openai.types.responses import ResponseFunctionToolCall

    return ResponseFunctionToolCall.model_validate(
        {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}", "id": f"fc_{n}"}
    )


@settings(max_examples=150, deadline=None)
@given(start=st.lists(ITEMS, max_size=5), ops=OPS, run=st.booleans())
def test_a_loop_whose_history_changes_anyhow_always_gets_fresh_fingerprints(
    start: list[dict[Any, Any]], ops: list[tuple[Any, ...]], run: bool
) -> None:
    """
    Items appended, inserted, deleted, copied, edited in place (subclass scalars too), tool calls
    added and their arguments changed: the memo's answer for the whole history is always the fresh one.
    """
    memo = Memo(max_bytes=8192)
    items: list[Any] = [dict(i) for i in start if len(_plain(i)) == len(i)]
    for step, op in enumerate(ops):
        kind, *args = op
        at = args[0] % (len(items) + 1) if args and isinstance(args[0], int) else 0
        if kind == "append":
            items.append(dict(args[0]))
        elif kind == "insert":
            items.insert(at, dict(args[1]))
        elif kind == "call":
            items.insert(at, _call(step))
        elif items and kind in ("edit", "delete", "copy", "mask"):
            at %= len(items)
            target = items[at]
            if kind == "delete":
                del items[at]
            elif kind == "copy":
                items[at] = dict(target) if isinstance(target, dict) else target.model_copy()
            elif kind == "mask" and not isinstance(target, dict):
                target.arguments = MaskedStr(args[1])
            elif kind == "edit" and isinstance(target, dict):
                target.clear()
                target.update(args[1])
        items = [i for i in items if not isinstance(i, dict) or len(_plain(i)) == len(i)]
        expected = [_fresh(i) if isinstance(i, dict) else fingerprint(i) for i in items]
        if None in expected:
            return
        assert expected == _fps(items, memo, run=run)


# -- memory held by a wrapped client after the caller drops its histories -----------------------------


@pytest.fixture(scope="module", name="remote_base_url")
def _remote_server() -> Iterator[str]:
    """The local Responses server in its own process, so its memory is not this process's."""
    with server_process() as base:
        yield base


IMAGE_BYTES = 1_000_000


def _image_conversations(client: openai.OpenAI, conversations: int) -> None:
    """Two calls per conversation, each call carrying one 1 MB image URL; then the caller drops all."""
    for n in range(conversations):
        image = "data:image/png;base64," + chr(65 + n % 26) * IMAGE_BYTES + str(n)
        history: list[Any] = [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": f"what is in image {n}?"},
                    {"type": "input_image", "image_url": image, "detail": "low"},
                ],
            }
        ]
        resp = client.responses.create(model="scripted", input=history)
        history += resp.output
        history.append({"role": "user", "content": "and now?"})
        client.responses.create(model="scripted", input=history)
        del history, image, resp


def _held_after(client: openai.OpenAI, conversations: int) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _image_conversations(client, conversations)
        gc.collect()
        return int(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()


def test_a_wrapped_client_does_not_keep_dropped_images_alive(remote_base_url: str) -> None:
    """60 calls each carrying a 1 MB image: after the caller drops them, the wrapped client holds about
    what the unwrapped one does (a megabyte or two), not the images."""
    raw = openai.OpenAI(base_url=remote_base_url, api_key="test", max_retries=0)
    wrapped = anchortrack.wrap(
        openai.OpenAI(base_url=remote_base_url, api_key="test", max_retries=0), store=MemoryStore()
    )
    _image_conversations(raw, 1)  # warm both paths up (imports, pools, caches)
    _image_conversations(wrapped, 1)

    unwrapped_held = _held_after(raw, 30)
    wrapped_held = _held_after(wrapped, 30)

    requests = anchortrack.tracker(wrapped).stats.snapshot()["requests"]
    chained = sum(row["count"] for row in requests if row["decision"] == "chained")
    assert chained >= 30  # the second call of every conversation chained
    assert wrapped_held < unwrapped_held + 2 * IMAGE_BYTES
    assert wrapped_held < 5 * IMAGE_BYTES


# -- a remembered SDK model's fingerprint is the one its own serializer gives ---------------------------


def _response_model_classes() -> list[type[Any]]:
    """Every pydantic model class of ``openai.types.responses``."""
    import pydantic
    from openai.types import responses

    found = {
        value
        for value in vars(responses).values()
        if isinstance(value, type) and issubclass(value, pydantic.BaseModel)
    }
    return sorted(found, key=lambda cls: cls.__name__)


MODEL_CLASSES = _response_model_classes()


@st.composite
def flat_models(draw: st.DrawFn) -> Any:
    """An SDK model of any Responses class: some of its fields set to strings or None, maybe extras."""
    cls = draw(st.sampled_from(MODEL_CLASSES))
    names = draw(st.lists(st.sampled_from(sorted(cls.model_fields)), unique=True, max_size=6))
    values = {name: draw(st.none() | st.text(max_size=4)) for name in names}
    extra_names = st.sampled_from(["note", "x_trace", "async"])
    extra = draw(st.dictionaries(extra_names, st.text(max_size=3), max_size=2))
    return cls.model_construct(**values, **extra)


@settings(max_examples=400, deadline=None)
@given(model=flat_models())
def test_a_models_fingerprint_through_the_memo_is_the_serializers(model: Any) -> None:
    """Any Responses model, strings and None in its fields (some of other types): fresh through the memo."""
    memo = Memo()
    assert _fps([model], memo) == [fingerprint(model)] == _fps([model], memo)


def test_a_model_whose_set_field_dumps_under_an_alias_is_dumped_by_its_serializer() -> None:
    """A set field with an alias: the memo's fingerprint follows what the serializer writes."""
    import pydantic
    from openai.types.responses import ResponseFunctionToolCall

    class Aliased(ResponseFunctionToolCall):
        tag: str | None = pydantic.Field(default=None, alias="tag-name")

    Aliased.__module__ = ResponseFunctionToolCall.__module__  # passes for a class of the SDK
    model = Aliased.model_validate(_tool_call().model_dump(exclude_unset=True))
    memo = Memo()
    first = _fps([model], memo)
    model.tag = "blue"
    assert _fps([model], memo) == [fingerprint(model)] != first
    assert b"blue" in dump_canonical(canonical_item(model))


def test_a_model_class_with_its_own_serializer_is_dumped_by_it() -> None:
    """A class of the openai package with a custom serializer: fingerprinted by what it writes."""
    import pydantic
    from openai.types.responses import ResponseFunctionToolCall

    class Shouting(ResponseFunctionToolCall):
        @pydantic.field_serializer("name")
        def _upper(self, value: str) -> str:
            return value.upper()

    Shouting.__module__ = ResponseFunctionToolCall.__module__  # passes for a class of the SDK
    model = Shouting.model_validate(_tool_call().model_dump())
    assert _fps([model], Memo()) == [fingerprint(model)]
    assert b'"name":"LOOKUP"' in dump_canonical(canonical_item(model))
