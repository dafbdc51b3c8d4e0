"""What crosses the trampoline: the call request, the child's result envelope, and their schemas.

Both sides use this module; the parent trusts nothing the child wrote until `parse_result`
accepted it (exact keys, types, bounds, finite numbers, UTF-8, and one rule for every string).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from agent_runner.plugins import DirtyIntent, PluginManifest, RoundReport, SpawnDecision

MAX_RESULT_BYTES = 64 * 1024
MAX_STDERR_BYTES = 8 * 1024
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_INT_DIGITS = 20
MAX_DEPTH = 16
MAX_DEFER_S = 86400 * 8
MAX_REASON_CHARS = 500
MAX_MESSAGE_CHARS = 2000
MAX_NAME_CHARS = 200
MAX_LIST_ITEMS = 1000
MAX_EVENTS = 100
HOOK_FAMILIES = ("spawn", "dirty", "observe")
FAMILIES = ("describe", *HOOK_FAMILIES, "selftest", "probe")
ENVELOPE_STATUSES = ("ok", "raised", "invalid", "oom")
# The first byte on the result descriptor, written by the child's own code before any plugin
# code can run: a refusal (then the child exits), or the promise that an envelope follows.
REFUSED_MARK = b"R"
CONFINED_MARK = b"C"
_EVENT_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
# What no plugin string may hold: C0 and C1 controls and DEL (every terminal escape starts
# with ESC or CSI), line and paragraph separators, bidirectional marks, embeddings, overrides
# and isolates, and lone surrogates (no UTF-8 line can hold one).
_UNSAFE_CHARS = (
    r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
)
_UNSAFE = re.compile(f"[{_UNSAFE_CHARS}]")
# Multi-line text (a commit message, a traceback) may also hold newlines and tabs.
_UNSAFE_MULTILINE = re.compile(rf"(?![\n\t])[{_UNSAFE_CHARS}]")


class WireError(ValueError):
    """A request or result does not match its schema."""


class Sources(Mapping[str, bytes]):
    """A plugin's module files (path -> bytes), encoded for requests once, on first use.

    Admission makes one per plugin, so its hook calls do not encode the same bytes again.
    """

    __slots__ = ("_encoded", "_files")

    def __init__(self, files: Mapping[str, bytes]) -> None:
        self._files = dict(files)
        self._encoded: bytes | None = None

    def __getitem__(self, path: str) -> bytes:
        return self._files[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def encoded(self) -> bytes:
        """The files as a request's `sources` object: JSON, each file's bytes in base64."""
        if self._encoded is None:
            files = {path: base64.b64encode(data).decode("ascii") for path, data in self.items()}
            self._encoded = json.dumps(files, separators=(",", ":")).encode()
        return self._encoded


def encode_request(
    family: str, entry: str, hook: str | None, view: Mapping[str, Any], sources: Mapping[str, bytes]
) -> bytes:
    """The request bytes the parent writes to the child's input pipe."""
    files = sources if isinstance(sources, Sources) else Sources(sources)
    payload = {"family": family, "entry": entry, "hook": hook, "view": dict(view)}
    head = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode()
    # The same object as {**payload, "sources": ...}, with the sources' text made once.
    return head[:-1] + b',"sources":' + files.encoded() + b"}"


def decode_request(data: bytes) -> dict[str, Any]:
    """The request as the child reads it; sources come back as bytes."""
    request: dict[str, Any] = loads_strict(data)
    _expect_keys(request, {"family", "entry", "hook", "view", "sources"}, "request")
    if request["family"] not in FAMILIES:
        raise WireError(f"unknown family {request['family']!r}")
    sources = request["sources"]
    if not isinstance(sources, dict):
        raise WireError("sources must be an object")
    request["sources"] = {path: base64.b64decode(text) for path, text in sources.items()}
    return request


def loads_strict(data: bytes | str) -> Any:
    """json.loads refusing NaN, infinities, huge numbers, duplicate keys, and bytes not UTF-8.

    json.loads would guess UTF-16 or UTF-32 from bytes and skip a byte-order mark: neither is
    accepted here.
    """
    if isinstance(data, bytes | bytearray):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WireError(f"not JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None

    def reject_constant(name: str) -> Any:
        raise WireError(f"non-finite number {name}")

    def parse_int(text: str) -> int:
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            raise WireError("integer too large")
        return int(text)

    def parse_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise WireError("number out of range")
        return value

    try:
        return json.loads(
            data,
            parse_constant=reject_constant,
            parse_int=parse_int,
            parse_float=parse_float,
            object_pairs_hook=_object_without_duplicates,
        )
    except WireError:
        raise
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from None


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Last-wins would let a writer show one value to a reader that stops at the first key.
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise WireError(f"duplicate key {key!r}")
            seen.add(key)
    return result


def encode_envelope(status: str, value: Any = None, detail: str = "") -> bytes:
    """What the child writes on its result descriptor after CONFINED_MARK."""
    envelope = {"status": status, "value": value, "detail": detail[:MAX_MESSAGE_CHARS]}
    return json.dumps(envelope, allow_nan=False, separators=(",", ":")).encode()


def encode_refusal(detail: str) -> bytes:
    """What the child's confinement code writes, instead of CONFINED_MARK, to refuse a call."""
    return REFUSED_MARK + json.dumps(escape_text(detail[:MAX_MESSAGE_CHARS])).encode()


def parse_result(family: str, data: bytes) -> tuple[str, Any, str]:
    """Read the whole result descriptor: ("refused", None, why) or the parsed envelope.

    Only the child's confinement code, before any plugin code runs, can write the first
    byte: whatever a plugin writes comes after CONFINED_MARK, and no envelope says "refused".
    """
    if len(data) > MAX_RESULT_BYTES:
        raise WireError(f"result larger than {MAX_RESULT_BYTES} bytes")
    mark, rest = data[:1], data[1:]
    if mark == REFUSED_MARK:
        detail = loads_strict(rest)
        if not isinstance(detail, str):
            raise WireError("refusal detail must be a string")
        return "refused", None, detail
    if mark != CONFINED_MARK:
        raise WireError("result does not start with the confinement mark")
    return parse_envelope(family, rest)


def parse_envelope(family: str, data: bytes) -> tuple[str, Any, str]:
    """Validate one envelope: (status, value, detail); the value only when status is ok."""
    envelope = loads_strict(data)
    _expect_keys(envelope, {"status", "value", "detail"}, "result envelope")
    status, value, detail = envelope["status"], envelope["value"], envelope["detail"]
    if status not in ENVELOPE_STATUSES:
        raise WireError(f"unknown status {status!r}")
    if not isinstance(detail, str):
        raise WireError("detail must be a string")
    if status != "ok":
        return status, None, detail[:MAX_MESSAGE_CHARS]
    return status, validate_value(family, value), detail


def validate_value(family: str, value: Any) -> Any:
    """Check a family's result value against its schema; return it unchanged."""
    validator = _VALIDATORS.get(family)
    if validator is None:
        raise WireError(f"unknown family {family!r}")
    validator(value)
    return value


def _validate_describe(value: Any) -> None:
    keys = {"name", "spawn_hooks", "dirty_handlers", "round_observers", "event_kinds"}
    _expect_keys(value, keys, "describe result")
    _expect_str(value["name"], "name", MAX_NAME_CHARS)
    for key in ("spawn_hooks", "dirty_handlers", "round_observers"):
        _expect_str_list(value[key], key, MAX_NAME_CHARS)
        for name in value[key]:
            if not name.isidentifier():
                raise WireError(f"{key}: hook name {name!r} is not an identifier")
    _expect_str_list(value["event_kinds"], "event_kinds", MAX_NAME_CHARS)
    for kind in value["event_kinds"]:
        if not _EVENT_KIND.fullmatch(kind):
            raise WireError(f"bad event kind {kind!r}")


def _validate_spawn(value: Any) -> None:
    _expect_keys(value, {"action", "defer_s", "reason"}, "spawn result")
    if value["action"] not in ("proceed", "defer", "skip"):
        raise WireError(f"unknown spawn action {value['action']!r}")
    _expect_number(value["defer_s"], "defer_s", 0, MAX_DEFER_S)
    _expect_str(value["reason"], "reason", MAX_REASON_CHARS)


def _validate_dirty(value: Any) -> None:
    _expect_keys(value, {"action", "message", "paths"}, "dirty result")
    if value["action"] not in ("stash", "commit", "ignore"):
        raise WireError(f"unknown dirty action {value['action']!r}")
    _expect_str(value["message"], "message", MAX_MESSAGE_CHARS, multiline=True)
    _expect_str_list(value["paths"], "paths", 4096)


def _validate_observe(value: Any) -> None:
    _expect_keys(value, {"events", "transient"}, "observe result")
    events = value["events"]
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise WireError(f"events must be a list of at most {MAX_EVENTS}")
    for event in events:
        if not isinstance(event, list) or len(event) != 2:
            raise WireError("each event must be [kind, fields]")
        kind, fields = event
        if not isinstance(kind, str) or not _EVENT_KIND.fullmatch(kind):
            raise WireError(f"bad event kind {kind!r}")
        if not isinstance(fields, dict):
            raise WireError("event fields must be an object")
        _expect_plain(fields, 0)
    transient = value["transient"]
    if transient is not None:
        _expect_keys(transient, {"classification", "reset_at"}, "transient")
        _expect_str(transient["classification"], "classification", 64)
        if transient["reset_at"] is not None:
            _expect_number(transient["reset_at"], "reset_at", 0, 2**40)


def _validate_selftest(value: Any) -> None:
    _expect_keys(value, {"blocked", "detail"}, "selftest result")
    if not isinstance(value["blocked"], bool):
        raise WireError("blocked must be a boolean")
    _expect_str(value["detail"], "detail", MAX_REASON_CHARS)


def _validate_probe(value: Any) -> None:
    _expect_keys(value, {"landlock_abi", "fs", "net", "scope", "seccomp", "notes"}, "probe")
    _expect_number(value["landlock_abi"], "landlock_abi", 0, 1000)
    for key in ("fs", "net", "scope", "seccomp"):
        if not isinstance(value[key], bool):
            raise WireError(f"{key} must be a boolean")
    _expect_str(value["notes"], "notes", MAX_MESSAGE_CHARS)


_VALIDATORS = {
    "describe": _validate_describe,
    "spawn": _validate_spawn,
    "dirty": _validate_dirty,
    "observe": _validate_observe,
    "selftest": _validate_selftest,
    "probe": _validate_probe,
}


def _expect_keys(value: Any, keys: set[str], what: str) -> None:
    if not isinstance(value, dict):
        raise WireError(f"{what} must be an object")
    if set(value) != keys:
        extra, missing = sorted(set(value) - keys), sorted(keys - set(value))
        raise WireError(f"{what} keys: extra {extra}, missing {missing}")


def _expect_str(value: Any, what: str, limit: int, *, multiline: bool = False) -> None:
    if not isinstance(value, str) or len(value) > limit:
        raise WireError(f"{what} must be a string of at most {limit} characters")
    check_text(value, what, multiline=multiline)


def check_text(value: str, what: str, *, multiline: bool = False) -> None:
    """The one rule for a plugin's string: no character that could steer a terminal or a log."""
    found = (_UNSAFE_MULTILINE if multiline else _UNSAFE).search(value)
    if found is not None:
        raise WireError(f"{what} holds the control or formatting character {_escape(found)}")


def escape_text(text: str, *, multiline: bool = False) -> str:
    """`text` with every character the string rule refuses written as a visible escape."""
    return (_UNSAFE_MULTILINE if multiline else _UNSAFE).sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _expect_str_list(value: Any, what: str, limit: int) -> None:
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
        raise WireError(f"{what} must be a list of at most {MAX_LIST_ITEMS} strings")
    for item in value:
        _expect_str(item, f"{what} item", limit)


def _expect_number(value: Any, what: str, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{what} must be a number")
    # The range first: an integer no float can hold makes isfinite raise OverflowError.
    if not (low <= value <= high and math.isfinite(value)):
        raise WireError(f"{what} must be within {low}..{high}")


def _expect_plain(value: Any, depth: int) -> None:
    """Plain JSON data with finite, 64-bit-bounded numbers and limited nesting."""
    if depth > MAX_DEPTH:
        raise WireError("nested too deeply")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        check_text(value, "string")
        return
    if isinstance(value, int | float):
        _expect_number(value, "number", -(2**63), 2**63 - 1)
    elif isinstance(value, list):
        for item in value:
            _expect_plain(item, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise WireError("object keys must be strings")
            check_text(key, "object key")
            _expect_plain(item, depth + 1)
    else:
        raise WireError(f"not plain JSON: {type(value).__name__}")


def describe_manifest(manifest: Any) -> dict[str, Any]:
    """Child side: the JSON summary of a module-level PLUGIN."""
    if not isinstance(manifest, PluginManifest):
        raise WireError(f"PLUGIN is a {type(manifest).__name__}, not a PluginManifest")
    return {
        "name": manifest.name,
        "spawn_hooks": [_hook_name(hook) for hook in manifest.spawn_hooks],
        "dirty_handlers": [_hook_name(hook) for hook in manifest.dirty_handlers],
        "round_observers": [_hook_name(hook) for hook in manifest.round_observers],
        "event_kinds": list(manifest.event_kinds),
    }


def _hook_name(hook: Any) -> str:
    name = getattr(hook, "__name__", None)
    if not isinstance(name, str):
        raise WireError("every hook must be a named function")
    return name


def result_to_json(family: str, result: Any) -> Any:
    """Child side: a hook's return object as the family's JSON value."""
    if family == "spawn":
        if not isinstance(result, SpawnDecision):
            raise WireError(f"spawn hook returned {type(result).__name__}, not SpawnDecision")
        return {"action": result.action, "defer_s": result.defer_s, "reason": result.reason}
    if family == "dirty":
        if not isinstance(result, DirtyIntent):
            raise WireError(f"dirty handler returned {type(result).__name__}, not DirtyIntent")
        return {"action": result.action, "message": result.message, "paths": list(result.paths)}
    if family == "observe":
        if result is None:
            return {"events": [], "transient": None}
        if not isinstance(result, RoundReport):
            raise WireError(f"observer returned {type(result).__name__}, not RoundReport")
        events = [[kind, dict(fields)] for kind, fields in result.events]
        transient = None if result.transient is None else dict(result.transient)
        return {"events": events, "transient": transient}
    raise WireError(f"family {family!r} has no hook results")
