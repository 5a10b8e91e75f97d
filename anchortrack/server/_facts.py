"""`Facts`: the one place of the context checks, and what the usage count and the scripted model's digest need
of a context, kept per cached chain so that a request extends its parent's with its own items only."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from anchortrack.server._errors import APIError, bad_request
from anchortrack.server._items import ITEM_TYPES, OUTPUTS, Item, item_type


Pair = tuple[str, str]  # (call item type, call_id)


def canonical_json(value: object) -> str:
    """The canonical JSON text the digests and token counts are computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def is_reference(item: Item) -> bool:
    """An ``item_reference``, spelled with ``type`` or as a bare ``{"id": …}``."""
    if item.get("type") == "item_reference":
        return True
    return item.get("type") is None and isinstance(item.get("id"), str) and set(item) <= {"id", "type"}


def _input_error(message: str) -> APIError:
    return bad_request("input", None, message)


@dataclass(frozen=True)
class Facts:
    """Facts of a context (items, oldest first): its ids and first duplicate, paired calls made and answered
    (and those left without the other), ids an MCP approval response or local shell call output may name and
    those answers; its item count and canonical JSON length; *hasher*: SHA-256 of that JSON, open-ended."""

    ids: frozenset[str] = frozenset()
    duplicate: str | None = None
    calls: frozenset[Pair] = frozenset()
    outputs: frozenset[Pair] = frozenset()
    unanswered: tuple[Pair, ...] = ()
    orphans: tuple[Pair, ...] = ()
    approvals: frozenset[object] = frozenset()
    shell_calls: frozenset[object] = frozenset()
    answers: tuple[Item, ...] = ()
    references: bool = False
    count: int = 0
    chars: int = 0
    hasher: Any = None

    def __deepcopy__(self, memo: object) -> Facts:
        return self  # immutable (the hasher is only ever copied)

    @staticmethod
    def of(items: Iterable[Item]) -> Facts:
        return EMPTY_FACTS.extend(items)

    def extend(self, items: Iterable[Item], named: dict[str, Item] | None = None) -> Facts:
        """The facts of this context followed by *items* (each read once); a reference pairs as the
        item of *named* its id names."""
        ids, duplicate = set(self.ids), self.duplicate
        new_calls: dict[Pair, None] = {}
        new_outputs: list[Pair] = []
        approvals, shell_calls, answers = set(self.approvals), set(self.shell_calls), list(self.answers)
        references, count, chars = self.references, self.count, self.chars
        hasher = self.hasher.copy() if self.hasher is not None else hashlib.sha256(b"[")
        for item in items:
            text = canonical_json(item)
            hasher.update(f",{text}".encode() if count else text.encode())
            count, chars = count + 1, chars + len(text)
            if is_reference(item):
                references = True
                item = (named or {}).get(item["id"], {})
            else:
                kind, item_id = item.get("type"), item.get("id")
                if isinstance(item_id, str):
                    if item_id in ids and duplicate is None:
                        duplicate = item_id
                    ids.add(item_id)
                if kind == "mcp_approval_request":
                    approvals.add(item_id)
                elif kind == "local_shell_call":
                    shell_calls.update((item_id, item.get("call_id")))
                if kind in ("mcp_approval_response", "local_shell_call_output"):
                    answers.append(item)
            kind, call_id = item.get("type"), item.get("call_id")
            if isinstance(kind, str) and isinstance(call_id, str):
                if item_type(kind).paired:
                    new_calls.setdefault((kind, call_id), None)
                elif item_type(OUTPUTS.get(kind)).paired:
                    new_outputs.append((OUTPUTS[kind], call_id))
        calls, outputs = self.calls | new_calls.keys(), self.outputs | frozenset(new_outputs)
        unanswered = [pair for pair in self.unanswered if pair not in outputs]
        unanswered += [pair for pair in new_calls if pair not in self.calls and pair not in outputs]
        orphans = [pair for pair in [*self.orphans, *new_outputs] if pair not in calls]
        pairs = (calls, outputs, tuple(unanswered), tuple(orphans))
        answered = (frozenset(approvals), frozenset(shell_calls), tuple(answers))
        return Facts(frozenset(ids), duplicate, *pairs, *answered, references, count, chars, hasher)

    @property
    def json_length(self) -> int:
        """The length of the canonical JSON of the context as a list."""
        return 2 + self.chars + max(self.count - 1, 0)

    def digest(self) -> str:
        """The SHA-256 hex digest of the canonical JSON of the context as a list."""
        hasher = self.hasher.copy() if self.hasher is not None else hashlib.sha256(b"[")
        hasher.update(b"]")
        return hasher.hexdigest()

    def check(self, *, pairs: bool = True) -> None:
        """Refuse what the real API refuses, in its order and words (APIError 400 ``param: input``); only the
        answers without *pairs*."""
        shell_calls = self.shell_calls - {None}
        for item in self.answers:
            if item.get("type") == "mcp_approval_response":
                if (request_id := item.get("approval_request_id")) not in self.approvals:
                    raise _input_error(f"No MCP approval request found for approval_request_id {request_id}.")
            elif not ({item.get("id"), item.get("call_id")} & shell_calls):
                message = f"No local shell call found for local shell call output with id {item.get('id')}."
                raise _input_error(message)
        if not pairs:
            return
        if self.duplicate is not None:
            message = f"Duplicate item found with id {self.duplicate}. Remove duplicate items from your "
            raise _input_error(message + "input and try again.")
        for call_kind, call_id in self.orphans[:1]:
            words = ITEM_TYPES[call_kind].paired
            raise _input_error(f"No tool call found for {words} output with call_id {call_id}.")
        for kind, call_id in self.unanswered[:1]:
            raise _input_error(f"No tool output found for {ITEM_TYPES[kind].paired} {call_id}.")


EMPTY_FACTS = Facts()


class Context(list[Item]):
    """A resolved context (a plain list of items) that carries its `Facts`."""

    def __init__(self, items: Sequence[Item], facts: Facts) -> None:
        super().__init__(items)
        self.facts = facts


def context_facts(context: Sequence[Item]) -> Facts:
    """*context*'s facts: carried by a `Context`, else read item by item."""
    return context.facts if isinstance(context, Context) else Facts.of(context)


def check_context(context: Sequence[Item]) -> None:
    """Refuse a resolved *context* as `Facts.check` does; a reference pairs as the item its id names."""
    facts = context_facts(context)
    if facts.references:
        named: dict[str, Item] = {}
        for item in context:
            if isinstance(item.get("id"), str) and not is_reference(item):
                named.setdefault(item["id"], item)
        facts = EMPTY_FACTS.extend(context, named)
    facts.check()
