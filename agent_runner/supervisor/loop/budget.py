"""Spend caps: rolling windows over the rounds started and the usage the CLIs reported.

Pure: the ledger is data and every function takes "now". It keeps a row per minute of the
last hour (rounds) and a row per five minutes of the last day (rounds, tokens, cost), so a
check, and what state.json holds, stay small however long serve runs. Costs and tokens are
as the CLI reported them; nothing is computed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent_runner.config import BudgetConfig

HOUR_S = 3600.0
DAY_S = 86_400.0
MINUTE_S = 60.0  # an entry leaves the hour at most a minute late, never early
SPAN_S = 300.0  # an entry leaves the day at most five minutes late, never early
MAX_ROWS = {HOUR_S: int(HOUR_S // MINUTE_S) + 2, DAY_S: int(DAY_S // SPAN_S) + 2}

# The newest moment recorded in it, rounds, tokens, and the cost in millionths of a dollar:
# whole numbers, so adding up and taking away never drifts.
Row = tuple[float, int, int, int]
MICRO = 1_000_000
COLUMNS = ("at", "rounds", "tokens", "cost_micro_usd")  # as state.json holds them
ROUNDS: Final = 1
TOKENS: Final = 2
COST: Final = 3
# Each cap: its window and the column it adds up.
CAPS = (
    ("max_cost_usd_per_day", DAY_S, COST),
    ("max_tokens_per_day", DAY_S, TOKENS),
    ("max_rounds_per_hour", HOUR_S, ROUNDS),
)


@dataclass(frozen=True)
class Totals:
    rounds: int
    tokens: int
    cost_usd: float


@dataclass(frozen=True)
class BudgetWait:
    """A cap is reached: wait until `until` (epoch seconds), when the window has room again."""

    cap: str
    used: float
    limit: float
    until: float


@dataclass(frozen=True)
class Ledger:
    """The rows of the last hour and of the last day, oldest first."""

    hour: tuple[Row, ...] = ()
    day: tuple[Row, ...] = ()

    def record(
        self, now: float, *, rounds: int = 0, tokens: int = 0, cost_usd: float = 0.0
    ) -> Ledger:
        """The ledger with this added at `now`, and rows older than their window dropped."""
        hour = _add(self.hour, now, MINUTE_S, HOUR_S, (now, rounds, 0, 0)) if rounds else None
        day = _add(self.day, now, SPAN_S, DAY_S, (now, rounds, tokens, _micro(cost_usd)))
        return Ledger(self.hour if hour is None else hour, day)

    def rows(self, window_s: float) -> tuple[Row, ...]:
        """The rows a window of `window_s` is read from: an hour's or a day's."""
        return self.hour if window_s <= HOUR_S else self.day

    def totals(self, now: float, window_s: float) -> Totals:
        """What the window ending at `now` holds (an hour's window holds rounds only)."""
        return _totals(_inside(self.rows(window_s), now, window_s))

    def since(self, moment: float) -> Totals:
        """What the day's rows recorded after `moment` (at most five minutes early)."""
        return _totals(tuple(row for row in self.day if row[0] > moment))

    def to_state(self) -> dict[str, dict[str, list[int]]]:
        return {"hour": _encoded(self.hour), "day": _encoded(self.day)}

    @classmethod
    def from_state(cls, raw: Any) -> Ledger | None:
        """The ledger state.json holds, or None when it is missing or not what serve writes."""
        if not isinstance(raw, dict):
            return None
        hour, day = _rows(raw.get("hour"), MAX_ROWS[HOUR_S]), _rows(raw.get("day"), MAX_ROWS[DAY_S])
        return None if hour is None or day is None else cls(hour, day)


def check(ledger: Ledger, caps: BudgetConfig, now: float) -> BudgetWait | None:
    """The wait before the next round may start, or None; when several caps are reached,
    the one that frees up last (the round needs room under all of them)."""
    waits = []
    for name, window_s, column in CAPS:
        limit = getattr(caps, name)
        if limit is None:
            continue
        scale = MICRO if column == COST else 1
        units = round(limit * scale)  # the cap in the column's whole units
        inside = _inside(ledger.rows(window_s), now, window_s)
        used = sum(row[column] for row in inside)
        if used < units:
            continue
        # The oldest rows leave the window first: wait until enough of them have gone.
        left = used
        for row in inside:
            left -= row[column]
            if left < units:
                until = min(row[0], now) + window_s
                waits.append(BudgetWait(name, used / scale, limit, until))
                break
    return max(waits, key=lambda w: w.until, default=None)


def usage_amounts(
    input_tokens: int | None, output_tokens: int | None, cost_usd: float | None
) -> tuple[int, float]:
    """Tokens (input + output) and cost for one round's reported usage; unreported ones are 0."""
    return max(0, input_tokens or 0) + max(0, output_tokens or 0), max(0.0, cost_usd or 0.0)


def ledger_from_events(events: Iterable[Mapping[str, Any]], now: float) -> Ledger:
    """The ledger rebuilt from `round_start` and `agent_usage_recorded` events, each carrying
    its epoch time under `at` (any order); what is older than a day is left out."""
    entries = []
    for event in events:
        at = event.get("at")
        if not isinstance(at, float):
            continue
        at = min(at, now)  # logged by a clock since set back: inside, as in `_inside`
        if event.get("event") == "round_start":
            entries.append((at, 1, 0, 0))
        elif event.get("event") == "agent_usage_recorded":
            tokens, cost = usage_amounts(
                _int(event.get("input_tokens")),
                _int(event.get("output_tokens")),
                _number(event.get("cost_usd")),
            )
            entries.append((at, 0, tokens, _micro(cost)))
    entries.sort(key=lambda e: e[0])
    rounds_only = [(at, rounds, 0, 0) for at, rounds, _, _ in entries if rounds]
    return Ledger(
        _grouped(rounds_only, MINUTE_S, HOUR_S, now), _grouped(entries, SPAN_S, DAY_S, now)
    )


def _grouped(entries: list[Row], width_s: float, window_s: float, now: float) -> tuple[Row, ...]:
    """What `Ledger.record` makes of `entries` (in time order) recorded one by one."""
    rows: dict[float, Row] = {}
    for at, rounds, tokens, cost in entries:
        slot = at // width_s
        old = rows.get(slot, (at, 0, 0, 0))
        rows[slot] = (max(old[0], at), old[1] + rounds, old[2] + tokens, old[3] + cost)
    return tuple(row for row in rows.values() if row[0] > now - window_s)


def _add(
    rows: tuple[Row, ...], now: float, width_s: float, window_s: float, entry: Row
) -> tuple[Row, ...]:
    start = 0
    while start < len(rows) and rows[start][0] <= now - window_s:
        start += 1
    kept = list(rows[start:])
    last = kept[-1] if kept else None
    # A clock set back lands in the newest row: the order of rows never breaks.
    if last is not None and (now // width_s == last[0] // width_s or now < last[0]):
        kept[-1] = (
            max(last[0], now),
            last[ROUNDS] + entry[ROUNDS],
            last[TOKENS] + entry[TOKENS],
            last[COST] + entry[COST],
        )
    else:
        kept.append(entry)
    return tuple(kept)


def _totals(rows: tuple[Row, ...]) -> Totals:
    return Totals(
        sum(r[ROUNDS] for r in rows),
        sum(r[TOKENS] for r in rows),
        sum(r[COST] for r in rows) / MICRO,
    )


def _encoded(rows: tuple[Row, ...]) -> dict[str, list[int]]:
    # Whole seconds, rounded up (a row never leaves early); columns of integers encode fast.
    at, rounds, tokens, cost = COLUMNS
    return {
        at: [math.ceil(row[0]) for row in rows],
        rounds: [row[ROUNDS] for row in rows],
        tokens: [row[TOKENS] for row in rows],
        cost: [row[COST] for row in rows],
    }


def _inside(rows: tuple[Row, ...], now: float, window_s: float) -> tuple[Row, ...]:
    # Rows are in time order. One stamped in the future (the clock was set back) is inside
    # and leaves one window from now: a clock change never holds a cap longer than that.
    return rows[bisect.bisect_right(rows, now - window_s, key=lambda row: row[0]) :]


def _rows(raw: Any, most: int) -> tuple[Row, ...] | None:
    if not isinstance(raw, dict):
        return None
    columns = [column for name in COLUMNS if isinstance(column := raw.get(name), list)]
    if len(columns) != len(COLUMNS):
        return None
    count = len(columns[0])
    if count > most or any(len(column) != count for column in columns):
        return None
    # Whole columns at a time (no Python work per number): status --all reads a hundred.
    for column in columns:
        if not set(map(type, column)) <= {int} or (column and min(column) < 0):
            return None
    moments = columns[0]
    if moments != sorted(moments):
        return None
    return tuple(zip(map(float, moments), columns[1], columns[2], columns[3], strict=True))


def _micro(cost_usd: float) -> int:
    return max(0, round(cost_usd * MICRO))


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
