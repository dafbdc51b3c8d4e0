"""The silence watchdog: a round whose agent printed nothing for `idle_timeout_s` ends.

Silence is counted from the last byte the transcript relay moved, or, when the agent's last
line announced a retry of its own ("Retrying after 90943ms"), from the end of that wait.
The round's wait asks `due_in` how long it may sleep, so no check runs more often than the
round's tick, plus once at the moment the window runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agent_runner.parsers import announced_wait

RETRY_LINE_BYTES = 64 * 1024  # enough for the longest retry line any CLI prints


class Output(Protocol):
    last_output_at: float

    def tail(self, limit: int) -> bytes: ...


def silence_deadline(last_output_at: float, timeout_s: float, announced_s: float | None) -> float:
    """When silence after output at `last_output_at` becomes a hang (monotonic seconds)."""
    return last_output_at + (announced_s or 0.0) + timeout_s


@dataclass
class SilenceWatch:
    """Watches one round's output; the transcript's tail is read only once the window ran out."""

    timeout_s: float
    output: Output
    parser: str
    monotonic: Callable[[], float]
    _read_for: float | None = field(default=None, init=False)  # last_output_at already read
    _announced: float | None = field(default=None, init=False)

    def silent_s(self) -> float | None:
        """Seconds of silence when the round must end now, else None."""
        now = self.monotonic()
        if now < self._deadline():
            return None
        last = self.output.last_output_at
        if self._read_for != last:
            # Only now, and once per silence: a retry announcement moves the deadline.
            self._read_for = last
            self._announced = announced_wait(self.parser, self.output.tail(RETRY_LINE_BYTES))
            if now < self._deadline():
                return None
        return now - last

    def due_in(self) -> float:
        """Seconds until the window could run out, at the earliest."""
        return max(0.0, self._deadline() - self.monotonic())

    def _deadline(self) -> float:
        last = self.output.last_output_at
        announced = self._announced if self._read_for == last else None
        return silence_deadline(last, self.timeout_s, announced)
