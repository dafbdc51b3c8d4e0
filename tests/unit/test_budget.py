"""Spend caps: the rolling-window arithmetic, replayed with a fake clock."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_runner.config import BudgetConfig
from agent_runner.supervisor.loop.budget import (
    DAY_S,
    HOUR_S,
    MAX_ROWS,
    MINUTE_S,
    SPAN_S,
    BudgetWait,
    Ledger,
    check,
    ledger_from_events,
    usage_amounts,
)
from tests.fakes import FakeClock

NO_CAPS = BudgetConfig(None, None, None)


def caps(cost: float | None = None, tokens: int | None = None, rounds: int | None = None):
    return BudgetConfig(cost, tokens, rounds)


def columns(at: list, rounds: list, tokens: list, cost: list) -> dict[str, list]:
    return {"at": at, "rounds": rounds, "tokens": tokens, "cost_micro_usd": cost}


def test_no_caps_never_wait() -> None:
    clock = FakeClock()
    ledger = Ledger()
    for _ in range(1000):
        ledger = ledger.record(clock.now(), rounds=1, tokens=10**9, cost_usd=100)
        clock.advance(1)
    assert check(ledger, NO_CAPS, clock.now()) is None


def test_below_a_cap_the_next_round_starts() -> None:
    clock = FakeClock()
    ledger = Ledger().record(clock.now(), cost_usd=4.99)
    assert check(ledger, caps(cost=5), clock.now()) is None


def test_a_reached_cost_cap_waits_until_the_oldest_spend_leaves_the_day() -> None:
    clock = FakeClock()
    start = clock.now()
    ledger = Ledger().record(clock.now(), cost_usd=3)
    clock.advance(2 * HOUR_S)
    ledger = ledger.record(clock.now(), cost_usd=3)
    wait = check(ledger, caps(cost=5), clock.now())
    assert wait == BudgetWait("max_cost_usd_per_day", 6, 5, start + DAY_S)
    clock.wall = start + DAY_S - 1
    assert check(ledger, caps(cost=5), clock.now()) is not None
    clock.wall = start + DAY_S
    assert check(ledger, caps(cost=5), clock.now()) is None  # $3 left: room again


def test_the_wait_lasts_until_enough_has_left_not_just_the_oldest_entry() -> None:
    clock = FakeClock()
    stamps = []
    ledger = Ledger()
    for _ in range(4):
        stamps.append(clock.now())
        ledger = ledger.record(clock.now(), tokens=1000)
        clock.advance(HOUR_S)
    # 4000 used, cap 2000: two of the four entries must leave first.
    wait = check(ledger, caps(tokens=2000), clock.now())
    assert wait is not None
    assert wait.until == stamps[2] + DAY_S
    assert wait.used == 4000


def test_rounds_per_hour_counts_rounds_that_reported_nothing() -> None:
    clock = FakeClock()
    start = clock.now()
    ledger = Ledger()
    for _ in range(3):
        ledger = ledger.record(clock.now(), rounds=1)
        clock.advance(5 * MINUTE_S)
    wait = check(ledger, caps(rounds=3, cost=0.01, tokens=1), clock.now())
    assert wait == BudgetWait("max_rounds_per_hour", 3, 3, start + HOUR_S)


def test_a_round_without_usage_never_counts_toward_cost_or_tokens() -> None:
    clock = FakeClock()
    ledger = Ledger()
    for _ in range(100):
        ledger = ledger.record(clock.now(), rounds=1)
        clock.advance(MINUTE_S)
    assert check(ledger, caps(cost=0.01, tokens=1), clock.now()) is None


def test_with_several_caps_reached_the_one_that_frees_last_decides() -> None:
    clock = FakeClock()
    start = clock.now()
    ledger = Ledger().record(clock.now(), rounds=1, cost_usd=10)
    clock.advance(30 * MINUTE_S)
    ledger = ledger.record(clock.now(), rounds=1)
    wait = check(ledger, caps(cost=5, rounds=2), clock.now())
    assert wait is not None
    assert wait.cap == "max_cost_usd_per_day"
    assert wait.until == start + DAY_S


def test_within_a_row_an_entry_leaves_with_the_rows_newest_moment() -> None:
    first = 1_800_000_000.0  # a whole five minutes
    ledger = Ledger().record(first, rounds=1, cost_usd=1)
    ledger = ledger.record(first + SPAN_S - 1, rounds=1, cost_usd=1)
    assert len(ledger.day) == 1
    assert len(ledger.hour) == 2  # the hour keeps a row per minute
    wait = check(ledger, caps(cost=2), first + SPAN_S - 1)
    assert wait is not None
    assert wait.until == first + SPAN_S - 1 + DAY_S  # never early; at most five minutes late
    rounds = check(ledger, caps(rounds=2), first + SPAN_S - 1)
    assert rounds is not None
    assert rounds.until == first + HOUR_S  # the hour is exact to the minute
    assert len(ledger.record(first + SPAN_S, cost_usd=1).day) == 2


def test_the_ledger_never_holds_more_than_its_windows_rows() -> None:
    clock = FakeClock()
    ledger = Ledger()
    for _ in range(3 * 1440):
        ledger = ledger.record(clock.now(), rounds=1, tokens=5, cost_usd=0.001)
        clock.advance(MINUTE_S)
    assert len(ledger.hour) <= MAX_ROWS[HOUR_S]
    assert len(ledger.day) <= MAX_ROWS[DAY_S]
    # One a minute, the newest a minute ago: the window (now - 1 day, now] holds 1439 minutes,
    # but a day's row leaves with its newest minute: up to four more stay in.
    assert 1439 <= ledger.totals(clock.now(), DAY_S).rounds <= 1443
    assert ledger.totals(clock.now(), HOUR_S).rounds == 59


def test_a_clock_set_back_never_holds_a_cap_longer_than_one_window() -> None:
    clock = FakeClock()
    ledger = Ledger().record(clock.now(), cost_usd=10)
    clock.wall -= 30 * DAY_S
    wait = check(ledger, caps(cost=5), clock.now())
    assert wait is not None
    assert wait.until == clock.now() + DAY_S
    ledger = ledger.record(clock.now(), cost_usd=1)  # lands in the newest row
    assert [r[0] for r in ledger.day] == sorted(r[0] for r in ledger.day)


def test_the_ledger_survives_state_json_and_refuses_what_serve_never_writes() -> None:
    clock = FakeClock()
    ledger = Ledger().record(clock.now(), rounds=1, tokens=7, cost_usd=0.25)
    ledger = ledger.record(clock.now() + 120, rounds=1)
    again = Ledger.from_state(json.loads(json.dumps(ledger.to_state())))
    assert again == ledger
    empty = columns([], [], [], [])
    for damaged in (
        None,
        "x",
        {"hour": [], "day": []},  # rows, not columns
        {"hour": empty, "day": columns([1], [1, 2], [0], [0])},  # ragged
        {"hour": empty, "day": columns([1], [-1], [0], [0])},
        {"hour": empty, "day": columns([1.5], [1], [0], [0])},  # whole seconds only
        {"hour": empty, "day": columns([1], [1], [0], [0.5])},  # whole millionths only
        {"hour": empty, "day": columns([1], [True], [0], [0])},
        {"hour": empty, "day": columns([2, 1], [1, 1], [0, 0], [0, 0])},  # out of order
        {"hour": columns(*[[1] * (MAX_ROWS[HOUR_S] + 1)] * 4), "day": empty},
        {"day": empty},
        {"hour": empty, "day": {"at": [1], "rounds": [1], "tokens": [0]}},
    ):
        assert Ledger.from_state(damaged) is None


def test_usage_amounts_add_input_and_output_and_count_unreported_as_zero() -> None:
    assert usage_amounts(1000, 250, 0.05) == (1250, 0.05)
    assert usage_amounts(None, 250, None) == (250, 0.0)
    assert usage_amounts(-5, None, -1.0) == (0, 0.0)


def test_the_ledger_rebuilt_from_events_matches_the_one_kept_while_running() -> None:
    clock = FakeClock()
    kept = Ledger()
    events = []
    for n in range(200):
        kept = kept.record(clock.now(), rounds=1)
        events.append({"event": "round_start", "round": n, "at": clock.now()})
        clock.advance(17)
        usage = {"input_tokens": 100 + n, "output_tokens": 30, "cost_usd": 0.01}
        kept = kept.record(clock.now(), tokens=130 + n, cost_usd=0.01)
        events.append({"event": "agent_usage_recorded", "at": clock.now(), **usage})
        events.append({"event": "round_end", "at": clock.now()})
        clock.advance(400)
    rebuilt = ledger_from_events(reversed(events), clock.now())
    for window in (HOUR_S, DAY_S):
        assert rebuilt.totals(clock.now(), window) == kept.totals(clock.now(), window)


def test_a_rebuild_skips_old_and_malformed_events() -> None:
    now = 1_800_000_000.0
    events = [
        {"event": "round_start", "at": now - DAY_S - 1},
        {"event": "round_start", "at": "yesterday"},
        {"event": "agent_usage_recorded", "at": now - 5, "input_tokens": "9", "cost_usd": True},
        {"event": "agent_usage_recorded", "at": now - 5, "output_tokens": 40, "cost_usd": 0.5},
        {"event": "round_start", "at": now - 10},
    ]
    totals = ledger_from_events(events, now).totals(now, DAY_S)
    assert (totals.rounds, totals.tokens, totals.cost_usd) == (1, 40, 0.5)


@given(
    st.lists(
        st.tuples(
            st.floats(0, 5 * HOUR_S),
            st.integers(0, 1),
            st.integers(0, 10**6),
            st.floats(0, 10),
        ),
        max_size=60,
    ),
    st.floats(1, 50),
    st.integers(1, 10**6),
    st.integers(1, 20),
)
def test_any_history_waits_exactly_until_the_window_is_below_every_cap(
    steps: list[tuple[float, int, int, float]], cost: float, tokens: int, rounds: int
) -> None:
    clock = FakeClock()
    ledger = Ledger()
    for gap, round_, used_tokens, used_cost in steps:
        clock.advance(gap)
        ledger = ledger.record(clock.now(), rounds=round_, tokens=used_tokens, cost_usd=used_cost)
    limits = caps(cost, tokens, rounds)
    wait = check(ledger, limits, clock.now())
    if wait is None:
        # No wait only while every window is below its cap, read through the ledger's totals.
        day, hour = ledger.totals(clock.now(), DAY_S), ledger.totals(clock.now(), HOUR_S)
        assert round(day.cost_usd * 1e6) < round(cost * 1e6)
        assert day.tokens < tokens
        assert hour.rounds < rounds
        return
    assert clock.now() < wait.until <= clock.now() + DAY_S
    assert check(ledger, limits, wait.until) is None
    assert check(ledger, limits, wait.until - 1e-3) is not None


@pytest.mark.parametrize("window", [HOUR_S, DAY_S])
def test_totals_of_an_empty_ledger_are_zero(window: float) -> None:
    totals = Ledger().totals(1_800_000_000.0, window)
    assert (totals.rounds, totals.tokens, totals.cost_usd) == (0, 0, 0)


@given(
    st.lists(
        st.tuples(st.floats(0, 3 * HOUR_S), st.booleans(), st.integers(0, 10**5)),
        max_size=80,
    )
)
def test_a_rebuilt_ledger_is_the_one_recording_each_event_would_have_made(
    steps: list[tuple[float, bool, int]],
) -> None:
    clock = FakeClock()
    kept = Ledger()
    events = []
    for gap, is_round, tokens in steps:
        clock.advance(gap)
        if is_round:
            kept = kept.record(clock.now(), rounds=1)
            events.append({"event": "round_start", "at": clock.now()})
        else:
            kept = kept.record(clock.now(), tokens=tokens, cost_usd=tokens / 1000)
            events.append(
                {
                    "event": "agent_usage_recorded",
                    "at": clock.now(),
                    "output_tokens": tokens,
                    "cost_usd": tokens / 1000,
                }
            )
    rebuilt = ledger_from_events(events, clock.now())
    recent = clock.now() - DAY_S
    assert list(rebuilt.day) == [r for r in kept.day if r[0] > recent]
    assert [r[:2] for r in rebuilt.hour] == [
        r[:2] for r in kept.hour if r[0] > clock.now() - HOUR_S
    ]
