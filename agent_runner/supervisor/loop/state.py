"""`<log_dir>/state.json`: the supervisor's state, rewritten atomically at every transition.

Readers (peek, status, the next serve after a crash) get a whole old or a whole new file,
never a mix: the writer renames a fully written temporary file over it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent_runner.events import Emit, events_backward, parse_ts
from agent_runner.files import read_regular, write_atomic
from agent_runner.supervisor.loop.budget import DAY_S, Ledger, ledger_from_events
from agent_runner.supervisor.loop.policy import LoopState

STATE_NAME = "state.json"
# Rebuilding the spend ledger reads back at most this many events (about a day of fast rounds).
LEDGER_REBUILD_MAX_EVENTS = 100_000
MAX_STATE_BYTES = 16 * 1024 * 1024
MAX_STATE_DEPTH = 16  # serve writes four levels; peek prints whatever it reads
_COUNTERS = (
    "failures",
    "crash_streak",
    "stall_streak",
    "auth_streak",
    "setup_streak",
    "internal_errors",
)
# Each top-level key serve writes: the types it may hold, and the keys readers rely on.
_SECTIONS: dict[str, tuple[tuple[type, ...], tuple[str, ...]]] = {
    "supervisor": ((dict,), ()),
    "round": ((dict, type(None)), ("number",)),
    "last_round": ((dict, type(None)), ("round", "exit_code", "exit_cause", "duration_s")),
    "last_round_number": ((int,), ()),
    "rounds_run": ((int,), ()),
    "loop": ((dict,), ()),
    "sandbox": ((dict, type(None)), ("tier", "landlock_abi")),
    "plugins": ((list,), ()),
    "phase_detail": ((dict,), ()),
    "budget": ((dict,), ()),  # checked whole by Ledger.from_state
    "notify": ((dict,), ()),
    "project": ((dict,), ()),
    "last_rounds": ((list,), ()),
    "backoff_reason": ((str, type(None)), ()),
    "stop": ((dict, type(None)), ("mode", "source")),
}
_SUMMARY_KEYS = _SECTIONS["last_round"][1]


def write_state(log_dir: Path, state: dict[str, Any]) -> None:
    """Replace state.json with `state` atomically.

    An OSError names state.json, not the temporary file: each try has a new one, and the
    same refusal must read the same every time (serve reports each distinct one once).
    """
    try:
        write_atomic(log_dir / STATE_NAME, encode_state(state).encode())
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(log_dir / STATE_NAME)) from None


def encode_state(state: dict[str, Any]) -> str:
    """state.json's text for `state`: the same state always gives the same text."""
    return json.dumps(state, separators=(",", ":"), sort_keys=True, default=str)


def read_state(log_dir: Path) -> dict[str, Any]:
    """The last state written, or {} when there is none or it is damaged."""
    return load_state(log_dir)[0]


def load_state(log_dir: Path) -> tuple[dict[str, Any], str | None]:
    """The last state written and None, or ({}, why it cannot be used)."""
    try:
        raw = read_regular(log_dir / STATE_NAME, max_bytes=MAX_STATE_BYTES, follow=False)
        state = json.loads(raw)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot read it: {exc.strerror or exc}"
    except RecursionError:
        return {}, "not valid JSON: nested too deeply"
    except ValueError as exc:  # also a number too long for int()
        return {}, f"not valid JSON: {str(exc)[:120]}"
    problem = state_problem(state)
    return ({}, problem) if problem is not None else (state, None)


def recover_state(log_dir: Path, emit: Emit, now: float) -> dict[str, Any]:
    """The previous serve's state; a damaged state.json is renamed aside, evented, and
    serve starts afresh instead of refusing to start until someone edits it by hand."""
    state, problem = load_state(log_dir)
    if problem is None:
        return state
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    aside = log_dir / f"{STATE_NAME}.damaged-{stamp}"
    for n in range(1, 100):
        if not os.path.lexists(aside):
            break
        aside = log_dir / f"{STATE_NAME}.damaged-{stamp}-{n}"
    try:
        os.rename(log_dir / STATE_NAME, aside)  # renames a planted symlink, not its target
    except OSError as exc:
        problem += f"; it could not be renamed ({exc.strerror}) and will be overwritten"
        aside = log_dir / STATE_NAME
    emit("state_file_set_aside", path=str(aside), reason=problem)
    return {}


def state_problem(state: Any) -> str | None:
    """Why `state` is not something serve wrote, or None."""
    if not isinstance(state, dict):
        return f"not a JSON object but {type(state).__name__}"
    # The spend ledger's shape is checked whole below, not number by number.
    if _depth({k: v for k, v in state.items() if k != "budget"}) > MAX_STATE_DEPTH:
        return f"nested deeper than {MAX_STATE_DEPTH} levels"
    for key, (types, required) in _SECTIONS.items():
        if key not in state:
            continue
        value = state[key]
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{key} is {type(value).__name__}, not {' or '.join(t.__name__ for t in types)}"
        missing = [name for name in required if isinstance(value, dict) and name not in value]
        if missing:
            return f"{key} has no {missing[0]}"
    return _contents_problem(state)


def _contents_problem(state: dict[str, Any]) -> str | None:
    if "loop" in state and not _loop_valid(state["loop"]):
        return "loop holds counters that are not what serve writes"
    if "budget" in state and Ledger.from_state(state["budget"]) is None:
        return "budget holds a ledger that is not what serve writes"
    return None


def recent_summaries(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The round summaries a previous serve kept, newest first (its last one, if older)."""
    kept = state.get("last_rounds")
    if not isinstance(kept, list):
        kept = [state["last_round"]] if isinstance(state.get("last_round"), dict) else []
    return [
        summary
        for summary in kept
        if isinstance(summary, dict) and all(key in summary for key in _SUMMARY_KEYS)
    ]


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in `value`, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_STATE_DEPTH:
                stack.extend((child, level + 1) for child in _children(item))
    return deepest


def _children(item: dict[str, Any] | list[Any]) -> list[Any]:
    return list(item.values()) if isinstance(item, dict) else item


def recover_ledger(previous: dict[str, Any], log_dir: Path, now: float) -> Ledger:
    """The spend ledger the previous serve left; rebuilt from the event log's tail (the last
    day, at most LEDGER_REBUILD_MAX_EVENTS events) when state.json has none or a damaged one."""
    ledger = Ledger.from_state(previous.get("budget"))
    if ledger is not None:
        return ledger
    return ledger_from_events(_last_day(log_dir, now), now)


def _last_day(log_dir: Path, now: float) -> Iterator[dict[str, Any]]:
    for count, event in enumerate(events_backward(log_dir)):
        if count >= LEDGER_REBUILD_MAX_EVENTS:
            return
        at = parse_ts(event.get("ts"))
        if at is None:
            continue
        if at <= now - DAY_S:
            return  # the log is in time order: everything before this is older still
        yield {**event, "at": at}


def loop_from_state(raw: Any, *, clean_exit: bool, latest: float) -> LoopState:
    """What a previous serve left that must survive a restart: the back-off, always; the
    breaker counters only after an unclean death (a deliberate restart starts them afresh).

    state.json is ours, but a damaged one must cost the counters, never the supervisor.
    """
    if not _loop_valid(raw):
        return LoopState()
    return _loop(raw, clean_exit, latest)


def _loop_valid(raw: Any) -> bool:
    if not isinstance(raw, dict):
        return False
    counters = {k: raw.get(k, 0) for k in _COUNTERS}
    streaks = raw.get("transient_streaks") or {}
    until, klass, source = (
        raw.get("backoff_until"),
        raw.get("backoff_class"),
        raw.get("backoff_source"),
    )
    return (
        all(type(v) is int and v >= 0 for v in counters.values())
        and isinstance(streaks, dict)
        and all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in streaks.items())
        and (until is None or (isinstance(until, int | float) and math.isfinite(until)))
        and (klass is None or isinstance(klass, str))
        and source in (None, "server", "estimated")
    )


def _loop(raw: dict[str, Any], clean_exit: bool, latest: float) -> LoopState:
    counters = {k: raw.get(k, 0) for k in _COUNTERS}
    streaks = raw.get("transient_streaks") or {}
    until = raw.get("backoff_until")
    return LoopState(
        **({} if clean_exit else counters),
        transient_streaks=dict(streaks),
        backoff_until=None if until is None else min(until, latest),
        backoff_class=raw.get("backoff_class"),
        backoff_source=raw.get("backoff_source"),
    )
