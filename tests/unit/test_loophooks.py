"""The spawn gate's waits and events, with a stand-in for the hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_runner.config import Config, parse_config
from agent_runner.plugins.hooks import SpawnVerdict
from agent_runner.supervisor.loophooks import SKIP_MIN_WAIT_S, SpawnGate, SpawnWait, spawn_view
from tests.fakes import RecordedEvents


class Answers:
    """Spawn hooks that answer from a list, one verdict a call."""

    def __init__(self, *verdicts: SpawnVerdict) -> None:
        self.verdicts = list(verdicts)
        self.views: list[dict[str, Any]] = []

    def has(self, family: str) -> bool:
        return bool(self.verdicts)

    def before_spawn(self, view: dict[str, Any]) -> SpawnVerdict:
        self.views.append(view)
        return self.verdicts.pop(0)


def config(restart_delay_s: float = 0) -> Config:
    document = {
        "schema_version": 1,
        "agent": {"command": ["agent", "--key=abc"], "parser": "none"},
        "runtime": {"restart_delay_s": restart_delay_s},
        "plugins": {"max_defer_s": 120},
    }
    return parse_config(document, Path("/x/agent-runner.toml"))


DEFER = SpawnVerdict("defer", 30, "later", "p:wait")
SKIP = SpawnVerdict("skip", 0, "not today", "p:stop")
PROCEED = SpawnVerdict()


def test_a_deferred_round_resumes_once_the_hooks_let_it_through() -> None:
    events = RecordedEvents()
    gate = SpawnGate(Answers(DEFER, DEFER, PROCEED, PROCEED), events)  # type: ignore[arg-type]
    waits = [gate.ask(config(), 4, None) for _ in range(3)]
    assert waits == [SpawnWait(30, "defer", "p:wait", "later")] * 2 + [None]
    assert gate.ask(config(), 5, None) is None
    assert [(e["event"], e["round"]) for e in events.events] == [
        ("round_deferred", 4),
        ("round_deferred", 4),
        ("round_resumed", 4),
    ]


def test_a_skip_waits_the_restart_delay_but_never_less_than_a_second() -> None:
    events = RecordedEvents()
    gate = SpawnGate(Answers(SKIP, SKIP), events)  # type: ignore[arg-type]
    assert gate.ask(config(restart_delay_s=0), 1, None) == SpawnWait(
        SKIP_MIN_WAIT_S, "skip", "p:stop", "not today"
    )
    assert gate.ask(config(restart_delay_s=7), 1, None) == SpawnWait(
        7, "skip", "p:stop", "not today"
    )
    assert (
        events.of("round_skipped")
        == [{"event": "round_skipped", "round": 1, "reason": "not today"}] * 2
    )
    assert not events.of("round_resumed")


def test_without_spawn_hooks_no_view_is_built() -> None:
    hooks = Answers()
    assert SpawnGate(hooks, RecordedEvents()).ask(config(), 1, None) is None  # type: ignore[arg-type]
    assert hooks.views == []


def test_the_spawn_view_redacts_argv_and_lists_env_names() -> None:
    view = spawn_view(config(), 9, {"round": 8})
    assert view["argv"] == ["agent", "--key=[REDACTED]"]
    assert "AGENT_RUNNER_ROUND" in view["env_names"]
    assert view["env_names"] == sorted(view["env_names"])
    assert (view["round"], view["last_round"], view["max_defer_s"]) == (9, {"round": 8}, 120)
