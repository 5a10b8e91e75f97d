"""Tests for `anchortrack._hashing`: the frozen digest scheme, scopes, and the fingerprint memo (it may only
ever return the fingerprint of the item's current value)."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import ResponseOutputMessage

from anchortrack import Scope
from anchortrack._hashing import SCHEME, Memo, fingerprint, fingerprint_items, prefix_hashes

from ..helpers import assistant


def _fps(items: list[Any], memo: Memo) -> list[bytes]:
    return fingerprint_items(items, memo)[0]


def test_golden_digests_are_stable() -> None:
    """The digest scheme is frozen: these bytes may only change together with SCHEME."""
    scope = Scope("https://api.openai.com/v1")
    history = ["hi", {"role": "assistant", "content": "yo"}]

    assert SCHEME == "anchortrack/4.2"
    assert fingerprint("hi").hex() == "c12dc832a3536f7c97db6d52e8e861f1"
    assert scope.key == "169b4acc8b78eb44"
    assert scope.root(None).hex() == "26d436002cd56d0e6caf15eb8d072db3"
    assert scope.root(b"k").hex() == "756aa24756b4288100995043b4b1383f"
    assert (
        prefix_hashes(scope.root(None), [fingerprint(i) for i in history])[-1].hex()
    ) == "46d389b5b2452f28bb30f6aebbfd5542"


def test_scope_parts_and_secret_change_the_root() -> None:
    """Another base URL, organization, project, namespace or secret key gives another root."""
    base = Scope("https://api.openai.com/v1")
    others = [
        Scope("https://example.test/v1"),
        Scope("https://api.openai.com/v1", organization="org"),
        Scope("https://api.openai.com/v1", project="proj"),
        Scope("https://api.openai.com/v1", namespace="tenant-a"),
    ]
    roots = {base.root(None), base.root(b"secret"), *(o.root(None) for o in others)}

    assert len(roots) == 6
    assert base.root(None) == Scope("https://api.openai.com/v1/").root(None)


def test_fingerprint_items_reports_sizes_and_model_output() -> None:
    """One pass gives fingerprints, canonical sizes, and whether model output is present."""
    items = ["hi", {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]

    fps, sizes, has_model = fingerprint_items(items)

    assert [fingerprint(i) for i in items] == fps
    assert all(size > 10 for size in sizes)
    assert has_model
    assert not fingerprint_items(["hi"])[2]


def test_in_place_edits_are_seen() -> None:
    """Middleware mutating an item in place (nested too) gets the new fingerprint, not the memo's."""
    memo = Memo()
    item: dict[str, Any] = {"role": "user", "content": [{"type": "input_text", "text": "card 4111"}]}
    first = _fps([item], memo)

    item["content"][0]["text"] = "card [redacted]"
    second = _fps([item], memo)
    item["role"] = "developer"
    third = _fps([item], memo)

    assert [
        fingerprint({"role": "user", "content": [{"type": "input_text", "text": "card [redacted]"}]})
    ] == second
    assert first != second != third
    assert [fingerprint(item)] == third


def test_number_aliasing_never_fools_the_memo() -> None:
    """1, 1.0 and True compare equal in Python but not in JSON: such items are never trusted by identity."""
    memo = Memo()
    item: dict[str, Any] = {"type": "x", "n": 1}
    one = _fps([item], memo)
    item["n"] = True
    true = _fps([item], memo)
    item["n"] = 1.0
    float_one = _fps([item], memo)

    assert len({one[0], true[0], float_one[0]}) == 3


def test_a_reused_object_id_is_checked_by_value() -> None:
    """An object that happens to reuse a dead item's id is compared by value first."""
    memo = Memo()
    for n in range(20):
        item = {"role": "user", "content": f"message {n}"}
        assert [fingerprint(item)] == _fps([item], memo)
        del item
        gc.collect()


def test_sdk_models_are_keyed_by_value() -> None:
    """Mutating an SDK model in place changes its fingerprint through the memo too."""
    memo = Memo()
    model = ResponseOutputMessage.model_validate(assistant("secret"))
    before = _fps([model], memo)
    model.content[0].text = "[redacted]"  # type: ignore[union-attr]

    assert before != _fps([model], memo)
    assert [fingerprint(model)] == _fps([model], memo)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@given(
    before=st.dictionaries(st.text(max_size=4), JSON, max_size=4),
    after=st.dictionaries(st.text(max_size=4), JSON, max_size=4),
)
def test_memo_always_agrees_with_a_fresh_fingerprint(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Whatever an item was and becomes in place, the memo returns the fresh fingerprint."""
    memo = Memo()
    item = dict(before)
    assert [fingerprint(item)] == _fps([item], memo)
    item.clear()
    item.update(after)

    assert [fingerprint(item)] == _fps([item], memo)


def test_an_item_whose_type_is_not_a_string_is_fingerprinted() -> None:
    """A malformed ``type`` (a list) is compared by value, never crashes the planner."""
    from anchortrack._hashing import fingerprint_items

    fps, _, has_model = fingerprint_items([{"type": []}, {"type": ["function_call"]}])
    assert fps[0] != fps[1]
    assert not has_model


def test_memo_prefix_hashes_equal_the_pure_ones_whatever_came_before() -> None:
    """Reusing the last history's prefix hashes never changes a result: extensions, edits, other roots."""
    memo = Memo()
    fps = [bytes([i]) * 16 for i in range(12)]
    edited = [*fps[:5], b"\xee" * 16, *fps[6:]]
    root_a, root_b = b"a" * 16, b"b" * 16
    sequence = [
        (root_a, fps[:3]),
        (root_a, fps[:8]),  # extends: continued
        (root_a, fps[:8]),  # same
        (root_a, edited),  # an edit inside the last one
        (root_a, fps),
        (root_b, fps),  # another scope
        (root_a, fps[:2]),  # shorter
        (root_a, []),
        (root_a, fps),
    ]
    for root, items in sequence:
        assert memo.prefix_hashes(root, items) == prefix_hashes(root, items)
