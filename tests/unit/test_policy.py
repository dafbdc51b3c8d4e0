"""The loop policy, replayed from histories of round outcomes with a fake clock."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_runner.config import BackoffConfig, BreakersConfig
from agent_runner.parsers import Transient
from agent_runner.supervisor.loop.policy import (
    Decision,
    Limits,
    LoopState,
    Outcome,
    after_internal_error,
    decide,
    merge_transient,
    restart_delay,
)

LIMITS = Limits(
    restart_delay_s=5,
    max_restart_delay_s=600,
    breakers=BreakersConfig(
        crash_loop_rounds=5,
        crash_window_s=60,
        stalled_rounds=10,
        stall_window_s=30,
        auth_failed_rounds=2,
        internal_error_restarts=3,
    ),
    backoff=BackoffConfig(estimated_base_s=60, estimated_max_s=1800, max_wait_s=691_200),
)
NOW = 1_800_000_000.0

CLEAN = Outcome("clean", duration_s=120, progressed=True)
FAST_ERROR = Outcome("error", duration_s=2, progressed=False)
SLOW_ERROR = Outcome("error", duration_s=300, progressed=False)
IDLE = Outcome("clean", duration_s=1, progressed=False)


def replay(outcomes: Iterable[Outcome], state: LoopState | None = None) -> list[Decision]:
    state = state or LoopState()
    decisions = []
    for outcome in outcomes:
        state, decision = decide(state, outcome, LIMITS, now=NOW)
        decisions.append(decision)
    return decisions


def test_clean_round_restarts_after_the_base_delay() -> None:
    assert replay([CLEAN]) == [Decision("continue", delay_s=5)]


def test_restart_delay_doubles_after_failures_up_to_the_ceiling() -> None:
    delays = [d.delay_s for d in replay([SLOW_ERROR] * 10)]
    assert delays == [10, 20, 40, 80, 160, 320, 600, 600, 600, 600]


def test_restart_delay_resets_after_a_clean_round() -> None:
    decisions = replay([SLOW_ERROR, SLOW_ERROR, CLEAN])
    assert [d.delay_s for d in decisions] == [10, 20, 5]


def test_zero_restart_delay_stays_zero() -> None:
    limits = Limits(0, 600, LIMITS.breakers, LIMITS.backoff)
    assert restart_delay(0, limits) == 0
    assert restart_delay(7, limits) == 0


def test_crash_loop_gives_up_after_n_fast_failures() -> None:
    decisions = replay([FAST_ERROR] * 5)
    assert [d.action for d in decisions] == ["continue"] * 4 + ["give_up"]
    assert (decisions[-1].breaker, decisions[-1].count) == ("crash_loop", 5)


def test_slow_failure_or_clean_round_breaks_the_crash_streak() -> None:
    history = [FAST_ERROR] * 4 + [SLOW_ERROR] + [FAST_ERROR] * 4 + [CLEAN] + [FAST_ERROR] * 4
    assert all(d.action == "continue" for d in replay(history))


@pytest.mark.parametrize("cause", ["timeout", "idle", "signal:SIGSEGV", "error"])
def test_every_kind_of_fast_failure_counts_toward_the_crash_loop(cause: str) -> None:
    decisions = replay([Outcome(cause, duration_s=1, progressed=False)] * 5)
    assert decisions[-1].breaker == "crash_loop"


def test_a_round_ended_by_the_silence_watchdog_is_a_failed_round() -> None:
    silent = Outcome("idle", duration_s=900, progressed=True)
    assert [d.delay_s for d in replay([silent] * 3)] == [10, 20, 40]
    assert replay([silent, CLEAN])[-1].delay_s == 5


def test_a_silent_round_mid_retry_backs_off_like_any_transient_round() -> None:
    retrying = Outcome("idle", duration_s=900, progressed=False, transient="api_transient_5xx")
    state, decision = decide(LoopState(), retrying, LIMITS, now=NOW)
    assert decision.action == "backoff"
    assert state.failures == 0


def test_transient_rounds_never_count_as_crashes() -> None:
    limited = Outcome("error", duration_s=1, progressed=False, transient="rate_limit_model")
    history = [FAST_ERROR] * 4 + [limited] * 20 + [FAST_ERROR]
    decisions = replay(history)
    assert decisions[-1].breaker == "crash_loop"  # 4 + 1: the transients in between did not add
    assert all(d.action != "give_up" for d in decisions[:-1])


def test_stalled_breaker_counts_fast_clean_rounds_without_progress() -> None:
    decisions = replay([IDLE] * 10)
    assert decisions[-1] == Decision("give_up", breaker="stalled_no_progress", count=10)
    assert all(d.action == "continue" for d in replay([IDLE] * 9 + [CLEAN] + [IDLE] * 9))


def test_progress_or_a_long_round_is_not_a_stall() -> None:
    busy = Outcome("clean", duration_s=1, progressed=True)
    slow = Outcome("clean", duration_s=31, progressed=False)
    assert all(d.action == "continue" for d in replay([busy, slow] * 20))


def test_auth_breaker_needs_consecutive_auth_failures() -> None:
    auth = Outcome("error", duration_s=100, progressed=False, auth_error=True)
    assert [d.action for d in replay([auth, CLEAN, auth])] == ["continue"] * 3
    decisions = replay([auth, auth])
    assert decisions[-1] == Decision("give_up", breaker="auth_failed", count=2)


def test_setup_errors_give_up_after_auth_failed_rounds_not_after_a_crash_loop() -> None:
    untrusted = Outcome("error", duration_s=2, progressed=False, setup_error=True)
    decisions = replay([untrusted, untrusted])
    assert decisions[0].action == "continue"
    assert decisions[-1] == Decision("give_up", breaker="setup_failed", count=2)


def test_setup_breaker_needs_consecutive_setup_errors() -> None:
    untrusted = Outcome("error", duration_s=2, progressed=False, setup_error=True)
    auth = Outcome("error", duration_s=2, progressed=False, auth_error=True)
    assert [d.action for d in replay([untrusted, CLEAN, untrusted])] == ["continue"] * 3
    # Each kind counts on its own: one of each in a row is neither breaker.
    assert [d.action for d in replay([untrusted, auth])] == ["continue"] * 2


def test_a_transient_round_between_setup_errors_restarts_their_count() -> None:
    untrusted = Outcome("error", duration_s=2, progressed=False, setup_error=True)
    limited = Outcome("error", 1, False, transient="rate_limit_model")
    decisions = replay([untrusted, limited, untrusted])
    assert [d.action for d in decisions] == ["continue", "backoff", "continue"]


def test_server_reset_time_is_obeyed_with_up_to_five_seconds_of_jitter() -> None:
    limited = Outcome("error", 1, False, transient="rate_limit_account", reset_at=NOW + 3600)
    state, decision = decide(LoopState(), limited, LIMITS, now=NOW, jitter=0.5)
    assert decision == Decision("backoff", until=NOW + 3602.5, source="server")
    assert (state.backoff_until, state.backoff_class) == (NOW + 3602.5, "rate_limit_account")
    _, decision = decide(LoopState(), limited, LIMITS, now=NOW, jitter=0.999)
    assert NOW + 3600 <= decision.until < NOW + 3605


def test_short_server_wait_gets_proportionally_short_jitter() -> None:
    limited = Outcome("error", 1, False, transient="rate_limit_account", reset_at=NOW + 3)
    _, decision = decide(LoopState(), limited, LIMITS, now=NOW, jitter=0.999)
    assert NOW + 3 <= decision.until <= NOW + 3.3


def test_server_reset_time_is_capped_at_max_wait() -> None:
    limited = Outcome("error", 1, False, transient="rate_limit_account", reset_at=NOW + 10**9)
    _, decision = decide(LoopState(), limited, LIMITS, now=NOW)
    assert decision.until == NOW + 691_200


def test_reset_time_in_the_past_falls_back_to_the_ladder() -> None:
    limited = Outcome("error", 1, False, transient="rate_limit_account", reset_at=NOW - 50)
    decisions = replay([limited, limited])
    assert [(d.until, d.source) for d in decisions] == [
        (NOW + 60, "estimated"),
        (NOW + 120, "estimated"),
    ]


def test_estimated_backoff_ladder_doubles_per_class_and_caps() -> None:
    limited = Outcome("error", 1, False, transient="api_transient_5xx")
    waits = [d.until - NOW for d in replay([limited] * 7) if d.until is not None]
    assert waits == [60, 120, 240, 480, 960, 1800, 1800]


def test_ladder_is_per_class_and_resets_after_a_good_round() -> None:
    five = Outcome("error", 1, False, transient="api_transient_5xx")
    timeout = Outcome("error", 1, False, transient="api_timeout")
    decisions = replay([five, five, timeout, CLEAN, five])
    waits = [d.until - NOW if d.until else None for d in decisions]
    assert waits == [60, 120, 60, None, 60]
    assert decisions[3].recovered == "api_timeout"


def test_backoff_recovers_only_on_a_clean_round() -> None:
    limited = Outcome("error", 1, False, transient="rate_limit_model")
    decisions = replay([limited, SLOW_ERROR, CLEAN])
    assert [d.recovered for d in decisions] == [None, None, "rate_limit_model"]


def test_backoff_recovered_only_once() -> None:
    limited = Outcome("error", 1, False, transient="rate_limit_model")
    decisions = replay([limited, CLEAN, CLEAN])
    assert [d.recovered for d in decisions] == [None, "rate_limit_model", None]


outcomes = st.builds(
    Outcome,
    exit_cause=st.sampled_from(["clean", "error", "timeout", "signal:SIGKILL"]),
    duration_s=st.floats(0, 10_000),
    progressed=st.booleans(),
    transient=st.sampled_from([None, None, "rate_limit_model", "api_timeout"]),
    reset_at=st.one_of(st.none(), st.floats(NOW - 1000, NOW + 10**7)),
    auth_error=st.booleans(),
    setup_error=st.booleans(),
)


@given(st.lists(outcomes, max_size=40))
def test_any_history_keeps_waits_within_bounds(history: list[Outcome]) -> None:
    for decision in replay(history):
        assert 0 <= decision.delay_s <= LIMITS.max_restart_delay_s
        if decision.until is not None:
            # Every back-off waits: a transient never turns into an immediate retry.
            assert NOW < decision.until <= NOW + LIMITS.backoff.max_wait_s


def test_internal_errors_in_a_row_give_up_at_the_limit() -> None:
    state = LoopState(crash_streak=2)
    decisions = []
    for _ in range(3):
        state, decision = after_internal_error(state, LIMITS)
        decisions.append(decision)
    assert decisions == [
        Decision("continue"),
        Decision("continue"),
        Decision("give_up", breaker="internal_error_loop", count=3),
    ]
    assert state.crash_streak == 2, "a crash of serve is not a round: the other counters stay"


def test_a_round_that_reaches_its_decision_resets_the_internal_error_count() -> None:
    state, _ = after_internal_error(LoopState(), LIMITS)
    state, _ = after_internal_error(state, LIMITS)
    for outcome in (CLEAN, FAST_ERROR, Outcome("error", 1, False, transient="api_timeout")):
        after, _ = decide(state, outcome, LIMITS, now=NOW)
        assert after.internal_errors == 0, outcome


# --- the parser's findings and the round observers' --------------------------------------


def found(classification: str, reset_at: float | None, source: str = "parser") -> Transient:
    return Transient(classification, reset_at, source)


def replay_findings(
    rounds: Iterable[tuple[Transient | None, list[Transient]]],
) -> list[Decision]:
    """Rounds of (parser finding, observer reports), through merge_transient and decide."""
    state, decisions = LoopState(), []
    for parsed, observed in rounds:
        chosen = merge_transient(parsed, observed, NOW)
        outcome = Outcome(
            "error",
            duration_s=5,
            progressed=False,
            transient=chosen.classification if chosen else None,
            reset_at=chosen.reset_at if chosen else None,
        )
        state, decision = decide(state, outcome, LIMITS, now=NOW)
        decisions.append(decision)
    return decisions


def test_an_observer_cannot_shorten_a_parser_found_wait() -> None:
    parsed = found("rate_limit_account", NOW + 3600)
    soon = found("rate_limit_account", NOW + 1, "reported by eager:hook")
    assert merge_transient(parsed, [soon], NOW) is parsed
    (decision,) = replay_findings([(parsed, [soon])])
    assert (decision.until, decision.source) == (NOW + 3600, "server")


def test_an_observer_cannot_replace_the_parsers_ladder_with_an_earlier_reset() -> None:
    parsed = found("api_transient_5xx", None)
    soon = found("rate_limit_model", NOW + 5, "reported by eager:hook")
    (decision,) = replay_findings([(parsed, [soon])])
    assert (decision.until, decision.source) == (NOW + 60, "estimated")


def test_without_a_parser_finding_the_earliest_honest_reset_wins() -> None:
    late = found("rate_limit_account", NOW + 7200, "reported by a:hook")
    early = found("rate_limit_model", NOW + 600, "reported by b:hook")
    stale = found("rate_limit_account", NOW - 30, "reported by c:hook")
    assert merge_transient(None, [late, stale, early], NOW) is early
    (decision,) = replay_findings([(None, [late, stale, early])])
    assert (decision.until, decision.source) == (NOW + 600, "server")


def test_an_observers_stale_reset_climbs_the_ladder_of_its_class() -> None:
    stale = found("api_timeout", NOW - 30, "reported by a:hook")
    assert merge_transient(None, [stale], NOW) == found("api_timeout", None, "reported by a:hook")
    decisions = replay_findings([(None, [stale])] * 3)
    assert [d.until for d in decisions] == [NOW + 60, NOW + 120, NOW + 240]


def test_observers_feed_the_same_ladder_as_the_parser() -> None:
    """One class, found by the parser once and by an observer twice: one streak."""
    parsed = found("api_transient_5xx", None)
    observed = found("api_transient_5xx", None, "reported by a:hook")
    decisions = replay_findings([(parsed, []), (None, [observed]), (None, [observed])])
    assert [d.until for d in decisions] == [NOW + 60, NOW + 120, NOW + 240]


def test_no_finding_and_no_report_is_no_transient() -> None:
    assert merge_transient(None, [], NOW) is None
    assert replay_findings([(None, [])]) == [Decision("continue", delay_s=10)]
