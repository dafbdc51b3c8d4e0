"""The spawn gate's waits and events, with a stand-in for the hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_runner.config import Config, parse_config
from agent_runner.parsers import Findings
from agent_runner.plugins.parent.hooks import ObservedTransient, SpawnVerdict
from agent_runner.supervisor.agent.process import AgentExit, transcript_path
from agent_runner.supervisor.loop.hooks import (
    SKIP_MIN_WAIT_S,
    TRANSCRIPT_TAIL_BYTES,
    SpawnGate,
    SpawnWait,
    observe_round,
    spawn_view,
)
from agent_runner.supervisor.loop.round import RoundResult
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


class Observers:
    """Round observers that only record the views they get."""

    def __init__(self) -> None:
        self.views: list[dict[str, Any]] = []

    def has(self, family: str) -> bool:
        return family == "observe"

    def after_round(self, view: dict[str, Any]) -> list[ObservedTransient]:
        self.views.append(view)
        return []


def config(restart_delay_s: float = 0, log_dir: str = "/x/logs") -> Config:
    document = {
        "schema_version": 1,
        "agent": {"command": ["agent", "--key=abc"], "parser": "none"},
        "runtime": {"restart_delay_s": restart_delay_s, "log_dir": log_dir},
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


def observed_tail(tmp_path: Path, held: bytes | None) -> str:
    """The transcript_tail an observer sees for round 3, whose file on disk says "on disk"."""
    cfg = config(log_dir=str(tmp_path))
    path = transcript_path(cfg.runtime.log_dir, 3)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"on disk\n")
    result = RoundResult(3, AgentExit(0, None, "clean", 1.0), Findings(), None, held)
    hooks = Observers()
    observe_round(hooks, cfg, result, RecordedEvents(), 0.0)  # type: ignore[arg-type]
    (view,) = hooks.views
    return str(view["transcript_tail"])


def test_observers_get_the_end_of_the_tail_the_parser_read_not_a_second_read(
    tmp_path: Path,
) -> None:
    lines = b"".join(b"line %06d\n" % n for n in range(20_000))  # 220 KB, cut mid-line
    tail = observed_tail(tmp_path, lines)
    assert tail.encode() == lines[-TRANSCRIPT_TAIL_BYTES:].split(b"\n", 1)[1]
    assert observed_tail(tmp_path / "short", b"all of it\n") == "all of it\n"


def test_without_a_parser_tail_observers_read_the_transcript(tmp_path: Path) -> None:
    assert observed_tail(tmp_path, None) == "on disk\n"
