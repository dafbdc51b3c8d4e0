"""The schemas: the validator catches each kind of drift; docs/json.md is generated from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from agent_runner.config import BreakersConfig
from agent_runner.errors import UsageError
from agent_runner.observe.contracts import (
    ALIVE_STATES,
    DOCUMENTS,
    SCHEMA_VERSION,
    Breaker,
    EventLine,
    PluginEntry,
    RoundSummary,
    StopDocument,
    SupervisorState,
    from_json,
    problems,
    render_docs,
    to_json,
)
from agent_runner.observe.peek import select_path
from agent_runner.supervisor.loop.policy import BreakerName, LoopState, breaker_streaks

DOCS = Path(__file__).parents[2] / "docs" / "json.md"
STOP = {"schema_version": 1, "outcome": "stopped", "pid": 7, "waited_s": 0.5, "detail": "ok"}


def test_docs_json_md_is_generated_from_the_schemas() -> None:
    assert DOCS.read_text() == render_docs(), "run `make docs` to regenerate docs/json.md"


def test_every_document_is_documented_with_its_version() -> None:
    text = render_docs()
    for command, cls in DOCUMENTS.items():
        assert f"## `{command}`" in text
        assert problems(cls, {"schema_version": SCHEMA_VERSION}) != []  # the rest is required
    assert "| `schema_version` | integer |" in text


def test_a_conforming_document_has_no_problems_and_round_trips() -> None:
    assert problems(StopDocument, STOP) == []
    doc = StopDocument(outcome="stopped", pid=7, waited_s=0.5, detail="ok")
    assert to_json(doc) == STOP
    assert list(to_json(doc)) == list(STOP)  # keys in schema order, schema_version first


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"outcome": "gone"}, "$.outcome: 'gone' is not"),
        ({"pid": "7"}, "$.pid: '7' is not integer or null"),
        ({"pid": True}, "$.pid: True is not integer or null"),
        ({"waited_s": float("nan")}, "$.waited_s: nan is not number"),
        ({"extra": 1}, "$: unexpected key 'extra'"),
        ({"detail": None}, "$.detail: None is not string"),
    ],
)
def test_each_kind_of_drift_is_a_problem(change: dict[str, Any], problem: str) -> None:
    found = problems(StopDocument, {**STOP, **change})
    assert len(found) == 1
    assert found[0].startswith(problem)


def test_a_missing_key_and_nested_drift_are_named_by_path() -> None:
    without = {k: v for k, v in STOP.items() if k != "pid"}
    assert problems(StopDocument, without) == ["$: no 'pid'"]
    breakers = {"crash_loop": {"count": 1, "limit": "5"}}
    assert problems(dict[str, Breaker], breakers) == ["$.crash_loop.limit: '5' is not integer"]
    rows = [{"name": "x"}]
    assert problems(list[PluginEntry], rows)[0] == "$[0]: no 'kind'"


def test_an_event_line_may_carry_its_kinds_fields() -> None:
    line = {"schema_version": 1, "ts": "2026-01-01T00:00:00.000Z", "event": "x", "round": 1}
    assert problems(EventLine, line) == []
    assert problems(EventLine, {**line, "ts": 5}) == ["$.ts: 5 is not string"]


def test_from_json_takes_only_what_conforms_and_fills_defaults() -> None:
    raw = {
        "round": 3,
        "exit_code": 0,
        "signal": None,
        "exit_cause": "clean",
        "duration_s": 1,
        "transient": None,
        "auth_error": False,
        "setup_error": False,
        "tree_action": None,
        "unknown": "dropped",
    }
    summary = from_json(RoundSummary, raw)
    assert summary is not None
    assert (summary.round, summary.ended_at) == (3, None)
    assert from_json(RoundSummary, {**raw, "round": "3"}) is None
    assert from_json(RoundSummary, {k: v for k, v in raw.items() if k != "round"}) is None
    assert from_json(RoundSummary, [raw]) is None


def test_alive_states_are_states() -> None:
    assert set(get_args(SupervisorState)) > ALIVE_STATES
    assert {"stopped", "crashed", "stale"}.isdisjoint(ALIVE_STATES)


def test_every_breaker_the_policy_can_trip_is_reported_with_its_limit() -> None:
    limits = BreakersConfig(
        crash_loop_rounds=5,
        crash_window_s=60,
        stalled_rounds=10,
        stall_window_s=30,
        auth_failed_rounds=2,
        internal_error_restarts=3,
    )
    state = LoopState(crash_streak=1, stall_streak=2, auth_streak=3, setup_streak=4)
    streaks = breaker_streaks(state, limits)
    assert set(streaks) == set(get_args(BreakerName))
    assert streaks["crash_loop"] == (1, 5)
    assert streaks["setup_failed"] == (4, 2)


def test_select_names_the_first_key_that_is_missing() -> None:
    doc = {"a": {"b": [{"c": 1}]}, "n": None}
    assert select_path(doc, "a.b.0.c") == 1
    for path, message in [
        ("a.x.c", "a has no key 'x' (keys: b)"),
        ("a.b.1", "a.b has no item '1' (1 items)"),
        ("n.m", "n is null, which has no key 'm'"),
        ("zz", "the document has no key 'zz' (keys: a, n)"),
    ]:
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            select_path(doc, path)
