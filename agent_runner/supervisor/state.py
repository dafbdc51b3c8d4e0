"""`<log_dir>/state.json`: the supervisor's state, rewritten atomically at every transition.

Readers (peek, status, the next serve after a crash) get a whole old or a whole new file,
never a mix: the writer renames a fully written temporary file over it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from agent_runner.files import read_regular, write_atomic
from agent_runner.supervisor.policy import LoopState

STATE_NAME = "state.json"
MAX_STATE_BYTES = 16 * 1024 * 1024


def write_state(log_dir: Path, state: dict[str, Any]) -> None:
    """Replace state.json with `state` atomically."""
    data = json.dumps(state, separators=(",", ":"), sort_keys=True, default=str).encode()
    write_atomic(log_dir / STATE_NAME, data)


def read_state(log_dir: Path) -> dict[str, Any]:
    """The last state written, or {} when there is none or it cannot be read."""
    try:
        raw = read_regular(log_dir / STATE_NAME, max_bytes=MAX_STATE_BYTES, follow=False)
        state = json.loads(raw)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def loop_from_state(raw: Any, *, clean_exit: bool, latest: float) -> LoopState:
    """What a previous serve left that must survive a restart: the back-off, always; the
    breaker counters only after an unclean death (a deliberate restart starts them afresh).

    state.json is ours, but a damaged one must cost the counters, never the supervisor.
    """
    if not isinstance(raw, dict):
        return LoopState()
    counters = {
        k: raw.get(k, 0)
        for k in (
            "failures",
            "crash_streak",
            "stall_streak",
            "auth_streak",
            "setup_streak",
            "internal_errors",
        )
    }
    streaks = raw.get("transient_streaks") or {}
    until, klass, source = (
        raw.get("backoff_until"),
        raw.get("backoff_class"),
        raw.get("backoff_source"),
    )
    valid = (
        all(type(v) is int and v >= 0 for v in counters.values())
        and isinstance(streaks, dict)
        and all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in streaks.items())
        and (until is None or (isinstance(until, int | float) and math.isfinite(until)))
        and (klass is None or isinstance(klass, str))
        and source in (None, "server", "estimated")
    )
    if not valid:
        return LoopState()
    return LoopState(
        **({} if clean_exit else counters),
        transient_streaks=dict(streaks),
        backoff_until=None if until is None else min(until, latest),
        backoff_class=klass,
        backoff_source=source,
    )
