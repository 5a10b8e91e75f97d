"""
Heavy items (screenshots, files, long tool outputs) through the fingerprint memo: an item proven once
stays proven while it is the same object holding the same strings, at the cost of its structure, not its
size; any in-place edit is still seen; past its bound the memo keeps what it holds instead of thrashing,
and it lets go of what the caller dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from anchortrack import _canonical, _hashing
from anchortrack._canonical import canonical_chunks, canonical_item
from anchortrack._hashing import Memo, fingerprint, fingerprint_history

from .test_memo_proof import MaskedStr, SameInt


SHOT = 300_000


def _shot(n: int, size: int = SHOT) -> str:
    return f"data:image/png;base64,{n:08d}" + chr(65 + n % 26) * size


def _screenshot_item(n: int, size: int = SHOT) -> dict[str, Any]:
    """A tool's answer carrying a screenshot, as a computer-use loop sends it."""
    image = {"type": "input_image", "image_url": _shot(n, size), "detail": "high"}
    return {"type": "function_call_output", "call_id": f"call_{n}", "output": [image]}


class Counting:
    """Records the items whose value the memo reads (``exact_value``) or fingerprints afresh."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read: list[int] = []  # id() of each item read, in order
        exact_value, fingerprint_one = _hashing.exact_value, _hashing._fingerprint_one

        def counted_value(item: object) -> bytes | None:
            self.read.append(id(item))
            return exact_value(item)

        def counted_fresh(item: object) -> Any:
            self.read.append(id(item))
            return fingerprint_one(item)

        monkeypatch.setattr(_hashing, "exact_value", counted_value)
        monkeypatch.setattr(_hashing, "_fingerprint_one", counted_fresh)

    def reset(self) -> set[int]:
        """The items read since the last reset."""
        out, self.read = set(self.read), []
        return out


def _fps(items: list[Any], memo: Memo) -> list[bytes]:
    return fingerprint_history(items, memo)[0]


def test_a_large_item_passed_again_is_proven_without_reading_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same screenshot object in the next call: no serialization, no hashing of its 300 KB."""
    counting = Counting(monkeypatch)
    memo = Memo()
    history = [{"role": "user", "content": "go"}, _screenshot_item(1)]
    first = _fps(history, memo)
    assert first == [fingerprint(item) for item in history]
    counting.reset()

    assert _fps(history, memo) == first
    assert counting.reset() == set()


def _edits() -> list[tuple[str, Callable[[dict[str, Any]], None]]]:
    """In-place edits of a screenshot item, at every depth, including the ones a lying type hides."""

    def image_replaced(item: dict[str, Any]) -> None:
        url = item["output"][0]["image_url"]
        item["output"][0]["image_url"] = url[:-1] + "Z"

    def image_equal_copy(item: dict[str, Any]) -> None:  # the same value in a new object: same fingerprint
        item["output"][0]["image_url"] = "".join(list(item["output"][0]["image_url"]))

    def image_masked(item: dict[str, Any]) -> None:
        item["output"][0]["image_url"] = MaskedStr(item["output"][0]["image_url"][:-1] + "Z")

    def key_added(item: dict[str, Any]) -> None:
        item["output"][0]["file_id"] = "file_1"

    def key_removed(item: dict[str, Any]) -> None:
        del item["output"][0]["detail"]

    def key_masked(item: dict[str, Any]) -> None:
        value = item["output"][0].pop("detail")
        item["output"][0][MaskedStr("details")] = value

    def value_replaced(item: dict[str, Any]) -> None:
        item["output"][0]["detail"] = "low"

    def top_key_replaced(item: dict[str, Any]) -> None:
        item["call_id"] = "call_other"

    def part_appended(item: dict[str, Any]) -> None:
        item["output"].append({"type": "input_text", "text": "and this"})

    def part_removed(item: dict[str, Any]) -> None:
        item["output"].append({"type": "input_text", "text": "x"})
        item["output"].pop(0)

    def parts_swapped(item: dict[str, Any]) -> None:
        item["output"].insert(0, {"type": "input_text", "text": "first"})

    def part_replaced(item: dict[str, Any]) -> None:
        item["output"][0] = {**item["output"][0], "image_url": _shot(2)}

    def list_cleared(item: dict[str, Any]) -> None:
        item["output"].clear()

    def output_to_text(item: dict[str, Any]) -> None:
        item["output"] = item["output"][0]["image_url"]

    def number_put(item: dict[str, Any]) -> None:
        item["output"][0]["detail"] = 1

    def number_lying(item: dict[str, Any]) -> None:
        item["output"][0]["detail"] = SameInt(3)

    return [
        (f.__name__, f)
        for f in (
            image_replaced,
            image_equal_copy,
            image_masked,
            key_added,
            key_removed,
            key_masked,
            value_replaced,
            top_key_replaced,
            part_appended,
            part_removed,
            parts_swapped,
            part_replaced,
            list_cleared,
            output_to_text,
            number_put,
            number_lying,
        )
    ]


@pytest.mark.parametrize(("name", "edit"), _edits(), ids=[name for name, _ in _edits()])
def test_a_large_item_edited_in_place_is_fingerprinted_afresh(name: str, edit: Callable[..., None]) -> None:
    """Whatever changes inside a proven 300 KB item, the memo's answer is the fresh fingerprint."""
    memo = Memo()
    item = _screenshot_item(1)
    history = [{"role": "user", "content": "go"}, item]
    first = _fps(history, memo)
    assert first == _fps(history, memo)

    edit(item)
    expected = fingerprint(item)
    assert _fps(history, memo)[1] == expected
    if name != "image_equal_copy":
        assert expected != first[1]
    assert _fps(history, memo)[1] == expected  # and again, now remembered as it is


def test_two_screenshots_swapped_in_place_are_seen() -> None:
    """Two equal-sized screenshots in one item, swapped in their list: same strings, another order."""
    memo = Memo()
    item = _screenshot_item(1)
    item["output"].append({**item["output"][0], "image_url": _shot(2)})
    first = _fps([item], memo)
    assert first == _fps([item], memo) == [fingerprint(item)]
    item["output"].reverse()
    assert _fps([item], memo) == [fingerprint(item)] != first
    item["output"][0]["detail"], item["output"][1]["detail"] = "low", "high"
    assert _fps([item], memo) == [fingerprint(item)]


def test_numbers_put_in_place_of_each_other_are_seen() -> None:
    """1, 1.0 and True are equal to Python but not on the wire: each is seen in place of the other."""
    memo = Memo()
    item: dict[str, Any] = {"type": "x", "n": 1, "f": 0.0}
    seen = [_fps([item], memo)[0]]
    for key, value in (("n", 1.0), ("n", True), ("f", -0.0), ("f", 0)):
        item[key] = value
        got = _fps([item], memo)[0]
        assert got == fingerprint(dict(item))
        assert got not in seen
        seen.append(got)


def _model_edits() -> list[tuple[str, Callable[[Any], None]]]:
    """In-place edits of a function call from the server, including the ones a lying type hides."""

    def arguments_set(model: Any) -> None:
        model.arguments = '{"a": 1}'

    def arguments_equal_copy(model: Any) -> None:  # the same value in a new object: same fingerprint
        model.arguments = "".join(list(model.arguments))

    def arguments_masked(model: Any) -> None:
        model.__dict__["arguments"] = MaskedStr('{"a": 1}')

    def field_unset(model: Any) -> None:  # exclude_unset now leaves the name out
        model.__pydantic_fields_set__.discard("name")

    def field_set(model: Any) -> None:  # the name, left out until now (see the test), is sent
        model.__pydantic_fields_set__.add("name")

    def extra_added(model: Any) -> None:
        model.__pydantic_extra__["note"] = "x"

    def number_put(model: Any) -> None:
        model.__dict__["name"] = 1

    def dict_replaced(model: Any) -> None:
        object.__setattr__(model, "__dict__", {**model.__dict__, "name": "other"})

    def class_swapped(model: Any) -> None:
        from openai.types.responses import ResponseCustomToolCall

        model.__class__ = ResponseCustomToolCall
        model.__dict__["input"] = model.__dict__.pop("arguments")
        model.__pydantic_fields_set__.add("input")
        model.__dict__["type"] = "custom_tool_call"

    return [
        (f.__name__, f)
        for f in (
            arguments_set,
            arguments_equal_copy,
            arguments_masked,
            field_unset,
            field_set,
            extra_added,
            number_put,
            dict_replaced,
            class_swapped,
        )
    ]


def _function_call() -> Any:
    from openai.types.responses import ResponseFunctionToolCall

    data = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "id": "fc_1"}
    return ResponseFunctionToolCall.construct(**data, status="completed")  # as the SDK builds an output


def test_an_sdk_model_passed_again_is_proven_by_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model from the server (resp.output) is serialized once; the same object again costs its fields."""
    model = _function_call()
    expected = [fingerprint(model)]
    memo = Memo()
    counting = Counting(monkeypatch)
    assert _fps([model], memo) == expected
    assert counting.reset() == {id(model)}
    assert _fps([model], memo) == expected
    assert counting.reset() == set()


@pytest.mark.parametrize(("name", "edit"), _model_edits(), ids=[name for name, _ in _model_edits()])
def test_an_sdk_model_edited_in_place_is_fingerprinted_afresh(name: str, edit: Callable[..., None]) -> None:
    """Whatever changes in a proven model (a field, its set fields, its extra dict, its class), it is seen."""
    model = _function_call()
    if name == "field_set":
        model.__pydantic_fields_set__.discard("name")
    memo = Memo()
    first = _fps([model], memo)
    assert first == _fps([model], memo)

    edit(model)
    expected = fingerprint(model)  # a str subclass (masked) counts as its data, as the SDK sends it
    assert _fps([model], memo) == [expected]
    if name != "arguments_equal_copy":
        assert expected != first[0]
    assert _fps([model], memo) == [expected]


def test_a_long_loop_past_the_bound_keeps_what_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    100 turns, room for about 10 large screenshots: every call proves the remembered ones by identity and
    reads only those past the bound (never a cascade that re-reads the whole history every call).
    """
    size = 70_000  # over max_item_bytes: a large item
    memo = Memo(max_bytes=10 * (size + 600) * 4 // 3)
    counting = Counting(monkeypatch)
    history: list[Any] = [{"role": "user", "content": "go"}]
    read_per_call: list[set[int]] = []
    for turn in range(100):
        history.append(_screenshot_item(turn, size))
        got = _fps(history, memo)
        read_per_call.append(counting.reset())
        assert got == [fingerprint(item) for item in history]
        assert memo.nbytes <= memo.max_bytes
        counting.reset()
        if turn == 20:
            kept = set(memo._seen)
    assert 10 <= len(kept) <= 11  # the user message and about 10 screenshots
    assert kept == set(memo._seen)  # the same ones from turn 20 to 100: nothing churns
    assert all(read_per_call[turn] == {id(history[turn + 1])} for turn in range(1, 8))  # only the new one
    for turn in range(21, 100):  # only the items past the bound, never one of those it keeps
        read = read_per_call[turn]
        assert not read & kept
        assert read == {id(item) for item in history[: turn + 2]} - kept


def test_a_new_conversation_displaces_an_old_one_the_caller_still_holds() -> None:
    """Past the bound, the items the current call does not use are the ones let go."""
    size = 20_000
    memo = Memo(max_bytes=(10 * size + 10 * 600) * 4 // 3)
    old = [_screenshot_item(n, size) for n in range(8)]
    _fps(old, memo)
    new: list[Any] = []
    for turn in range(8):
        new.append(_screenshot_item(100 + turn, size))
        _fps(new, memo)
    held = {id(item) for item in new} & set(memo._seen)
    assert len(held) == 8  # the whole current conversation is remembered
    assert len(set(memo._seen) & {id(item) for item in old}) <= 2


def test_a_dropped_conversation_is_released_at_the_next_large_item() -> None:
    """Items the caller dropped are let go of as soon as another large item is remembered."""
    memo = Memo()
    history: list[Any] = [_screenshot_item(n) for n in range(10)]
    _fps(history, memo)
    assert memo.nbytes > 10 * SHOT
    del history
    _fps([_screenshot_item(99)], memo)
    assert SHOT < memo.nbytes < 2 * SHOT


def _reference_fingerprint(item: object) -> bytes:
    """The fingerprint as the scheme defines it: SHA-256 of ``json.dumps`` of the canonical form, 16 bytes."""
    text = json.dumps(canonical_item(item), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:16]


#: Every character ``json.dumps`` escapes, and characters it writes as they are (non-ASCII, DEL, a lone
#: surrogate), each put at the start, the middle and the end of long and short strings.
_SPECIAL = [*map(chr, range(32)), '"', "\\", "\x7f", "é", "€", "\U0001d11e", "\ud800", "/", "'"]


@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, 70_000])
def test_a_long_string_is_written_as_json_dumps_writes_it(size: int) -> None:
    """A long string with nothing to escape is written as it is: its canonical bytes are unchanged."""
    base = _shot(7, size)
    for char in _SPECIAL:
        for at in (0, len(base) // 2, len(base)):
            text = base[:at] + char + base[at:]
            item = _screenshot_item(7)
            item["output"][0]["image_url"] = text
            assert fingerprint(item) == _reference_fingerprint(item), (char, at)
            assert fingerprint(text) == _reference_fingerprint(text), (char, at)
    assert fingerprint(base) == _reference_fingerprint(base)
    long_key = {"type": "x", base: base, "call_id": "c"}
    assert fingerprint(long_key) == _reference_fingerprint(long_key)


@pytest.mark.parametrize("c_encoder", [True, False])
def test_each_long_string_is_hashed_as_a_chunk_of_its_own(
    monkeypatch: pytest.MonkeyPatch, c_encoder: bool
) -> None:
    """
    A long string with nothing to escape is a chunk of its own (hashed as it is, never copied into one
    text with the rest of the item); the chunks join to the canonical bytes ``json.dumps`` writes, and
    the size counted is their length. Without the C encoder the bytes are the same, in one chunk.
    """
    if not c_encoder:
        monkeypatch.setattr(_canonical, "_encoder", None)
    first, second, escaped = _shot(1, 5000), _shot(2, 6000), _shot(3, 5000) + "\n"
    content = [
        {"type": "input_text", "text": first},
        {"type": "input_image", "image_url": second, "detail": "high"},
        {"type": "input_text", "text": escaped},
    ]
    item = {"type": "message", "role": "user", "content": content}
    chunks = canonical_chunks(canonical_item(item))
    if c_encoder:  # the escaped one stays in the text
        assert chunks[1::2] == [first.encode(), second.encode()]
    else:
        assert len(chunks) == 1
    text = json.dumps(canonical_item(item), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    assert b"".join(chunks) == text.encode("utf-8", "surrogatepass")
    assert fingerprint(item) == _reference_fingerprint(item)
    assert _hashing._fingerprint_one(item)[1] == len(text.encode())


def test_a_loop_sweeps_no_entry_its_call_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """
    Each new screenshot sweeps the large entries for dropped items, skipping the ones the call used: a
    loop that passes its whole history checks none, so a call costs the new items, not the history.
    """
    checked: list[int] = []
    held_by_memo_only = _hashing._held_by_memo_only

    def counted(entry: list[Any]) -> bool:
        checked.append(id(entry))
        return held_by_memo_only(entry)

    monkeypatch.setattr(_hashing, "_held_by_memo_only", counted)
    memo = Memo(max_bytes=1 << 30)  # no sweep of every entry (each budget/16 of growth) in this loop
    history: list[Any] = [{"role": "user", "content": "go"}]
    for turn in range(30):
        history += [{"type": "function_call", "call_id": f"call_{turn}", "name": "f", "arguments": "{}"}]
        history.append(_screenshot_item(turn, 70_000))
        assert _fps(history, memo) == [fingerprint(item) for item in history]
    assert len(memo._seen) == 61
    assert checked == []
    history = [_screenshot_item(99, 70_000)]  # the caller dropped the old history: its screenshots go
    _fps(history, memo)
    assert len(checked) == 30
    assert len(memo._seen) == 32  # the old small items wait for the next sweep of every entry
