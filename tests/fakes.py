"""Test doubles shared by unit and integration tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent_runner.events import check_event


@dataclass
class RecordedEvents:
    """An `emit` callable that keeps every event in memory.

    Like the real event log it refuses an unregistered kind or a wrong field set, so a test
    cannot pass with an event the supervisor would fail to write.
    """

    events: list[dict[str, Any]] = field(default_factory=list)
    plugin_kinds: set[str] = field(default_factory=set)  # `<plugin>.<kind>` names accepted

    def __call__(self, kind: str, **fields: Any) -> None:
        event = {"event": kind, **fields}
        check_event(event, self.plugin_kinds)
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e["event"] for e in self.events]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]


@dataclass
class FakeClock:
    """A clock that moves only when told to."""

    wall: float = 1_800_000_000.0
    mono: float = 1000.0

    def now(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds
