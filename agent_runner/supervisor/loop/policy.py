"""Pure loop policy: restart delay, breakers and back-off from the outcome of each round.

No I/O and no clock: every function takes "now" and returns new state plus a decision,
so the whole policy is replayable from a list of outcomes in unit tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from agent_runner.config import BackoffConfig, BreakersConfig

if TYPE_CHECKING:  # the parsers compile their patterns at import; peek and status read this
    from agent_runner.parsers import Transient

SERVER_JITTER_MAX_S = 5.0
SERVER_JITTER_SHARE = 0.1  # short waits get proportionally short jitter


@dataclass(frozen=True)
class Limits:
    """The config values the policy reads."""

    restart_delay_s: float
    max_restart_delay_s: float
    breakers: BreakersConfig
    backoff: BackoffConfig


@dataclass(frozen=True)
class Outcome:
    """What one round showed, as far as the policy cares."""

    exit_cause: str  # clean | error | timeout | idle | signal:NAME | stopped
    duration_s: float
    progressed: bool  # a new commit, or work left in the tree
    transient: str | None = None  # classification
    reset_at: float | None = None  # server-given reset time (epoch seconds)
    auth_error: bool = False
    setup_error: bool = False  # the CLI refused to start: untrusted folder, no auth method, …
    reason: str = ""  # short, redacted tail of the transcript for breaker events


@dataclass(frozen=True)
class LoopState:
    """Counters carried from round to round (and across restarts, via state.json)."""

    failures: int = 0  # failed rounds in a row: drives the restart delay
    crash_streak: int = 0
    stall_streak: int = 0
    auth_streak: int = 0
    setup_streak: int = 0
    internal_errors: int = 0  # serve runs in a row that ended in an internal error
    transient_streaks: Mapping[str, int] = field(default_factory=dict)
    backoff_until: float | None = None
    backoff_class: str | None = None
    backoff_source: Literal["server", "estimated"] | None = None


BreakerName = Literal[
    "crash_loop", "stalled_no_progress", "auth_failed", "setup_failed", "internal_error_loop"
]


def breaker_streaks(state: LoopState, b: BreakersConfig) -> dict[BreakerName, tuple[int, int]]:
    """Each breaker's streak so far and the count at which it trips."""
    return {
        "crash_loop": (state.crash_streak, b.crash_loop_rounds),
        "stalled_no_progress": (state.stall_streak, b.stalled_rounds),
        "auth_failed": (state.auth_streak, b.auth_failed_rounds),
        "setup_failed": (state.setup_streak, b.auth_failed_rounds),
        "internal_error_loop": (state.internal_errors, b.internal_error_restarts),
    }


@dataclass(frozen=True)
class Decision:
    """What the loop does next."""

    action: Literal["continue", "backoff", "give_up"]
    delay_s: float = 0.0  # restart delay before the next round (continue)
    until: float | None = None  # back-off end, epoch seconds (backoff)
    source: Literal["server", "estimated"] | None = None
    breaker: BreakerName | None = None
    count: int = 0
    recovered: str | None = None  # a back-off class this round recovered from


def restart_delay(failures: int, limits: Limits) -> float:
    """Seconds to wait before the next round after `failures` failed rounds in a row."""
    if failures == 0:
        return limits.restart_delay_s
    # Doubling with a ceiling: a broken agent costs at most one start per max delay.
    return min(limits.restart_delay_s * 2.0**failures, limits.max_restart_delay_s)


def backoff_until(
    streak: int, reset_at: float | None, now: float, jitter: float, b: BackoffConfig
) -> tuple[float, Literal["server", "estimated"]]:
    """When the `streak`-th consecutive transient of a class may retry, and who said so.

    `jitter` in [0, 1) spreads server-timed retries by up to 5 s (less for short waits).
    """
    latest = now + b.max_wait_s
    if reset_at is not None and reset_at > now:
        # The server knows when the quota refills: obey it, spread a little, never past the cap.
        wait = reset_at - now
        spread = jitter * min(SERVER_JITTER_MAX_S, SERVER_JITTER_SHARE * wait)
        return min(now + wait + spread, latest), "server"
    # No reset time, or one already past (a stale or misread one): the refusal is fresh, so
    # climb the ladder rather than retry at once; transient rounds never trip a breaker.
    wait = min(b.estimated_base_s * 2.0 ** (streak - 1), b.estimated_max_s)
    return min(now + wait, latest), "estimated"


def merge_transient(
    found: Transient | None, observed: Sequence[Transient], now: float
) -> Transient | None:
    """The transient the back-off obeys, from the parser's finding and the round observers'.

    The parser's finding stands as found: an observer can neither shorten nor replace the
    wait it sets. Otherwise the observers' earliest honest reset wins (one still ahead of
    `now`); with none, the first observer's class climbs the estimated ladder.
    """
    if found is not None or not observed:
        return found
    honest = [t for t in observed if t.reset_at is not None and t.reset_at > now]
    if honest:
        return min(honest, key=lambda t: t.reset_at or 0.0)
    return replace(observed[0], reset_at=None)


def decide(
    state: LoopState, outcome: Outcome, limits: Limits, *, now: float, jitter: float = 0.0
) -> tuple[LoopState, Decision]:
    """The state after `outcome` and what to do next; `jitter` is a random number in [0, 1)."""
    # A round that reached its decision is the proof that serve itself works again.
    state = replace(state, internal_errors=0)
    b = limits.breakers
    auth_streak = state.auth_streak + 1 if outcome.auth_error else 0
    if outcome.auth_error and auth_streak >= b.auth_failed_rounds:
        new = replace(state, auth_streak=auth_streak)
        return new, Decision("give_up", breaker="auth_failed", count=auth_streak)
    # A CLI that cannot start in this setup fails the same way every round until someone
    # fixes the setup: give up as soon as for a refused key, not after a crash loop.
    setup_streak = state.setup_streak + 1 if outcome.setup_error else 0
    if outcome.setup_error and setup_streak >= b.auth_failed_rounds:
        new = replace(state, auth_streak=auth_streak, setup_streak=setup_streak)
        return new, Decision("give_up", breaker="setup_failed", count=setup_streak)

    if outcome.transient is not None:
        streak = state.transient_streaks.get(outcome.transient, 0) + 1
        until, source = backoff_until(streak, outcome.reset_at, now, jitter, limits.backoff)
        new = replace(
            state,
            auth_streak=auth_streak,
            setup_streak=setup_streak,
            transient_streaks={**state.transient_streaks, outcome.transient: streak},
            backoff_until=until,
            backoff_class=outcome.transient,
            backoff_source=source,
        )
        # A rate-limited round is not a crash: crash and stall counters stay as they were.
        return new, Decision("backoff", until=until, source=source)

    failed = outcome.exit_cause not in ("clean", "stopped")
    # Recovery is a good round; a failure after a back-off keeps the class for the next one.
    recovered = state.backoff_class if outcome.exit_cause == "clean" else None
    fast_failure = failed and outcome.duration_s < b.crash_window_s
    crash_streak = state.crash_streak + 1 if fast_failure else 0
    idle = (
        outcome.exit_cause == "clean"
        and outcome.duration_s < b.stall_window_s
        and not outcome.progressed
    )
    stall_streak = state.stall_streak + 1 if idle else 0
    failures = state.failures + 1 if failed else 0
    new = LoopState(
        failures=failures,
        crash_streak=crash_streak,
        stall_streak=stall_streak,
        auth_streak=auth_streak,
        setup_streak=setup_streak,
        backoff_class=None if recovered else state.backoff_class,
    )
    if crash_streak >= b.crash_loop_rounds:
        return new, Decision("give_up", breaker="crash_loop", count=crash_streak)
    if stall_streak >= b.stalled_rounds:
        return new, Decision("give_up", breaker="stalled_no_progress", count=stall_streak)
    return new, Decision("continue", delay_s=restart_delay(failures, limits), recovered=recovered)


def after_internal_error(state: LoopState, limits: Limits) -> tuple[LoopState, Decision]:
    """serve is dying of its own bug: count it, and give up once restarts keep hitting it.

    The count survives the restart (state.json, phase `crashed`) and resets only when a round
    gets as far as its decision, so a bug that strikes every round ends in exit 69.
    """
    count = state.internal_errors + 1
    new = replace(state, internal_errors=count)
    if count >= limits.breakers.internal_error_restarts:
        return new, Decision("give_up", breaker="internal_error_loop", count=count)
    return new, Decision("continue")
