"""The one place the program reads time; pass a fake one to policy and tests."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    """Wall-clock and monotonic time. Policy code receives readings, never calls this."""

    def now(self) -> float:
        """Seconds since the epoch (wall clock), for timestamps and server reset times."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps, for budgets and delays."""
        return time.monotonic()


SYSTEM_CLOCK = Clock()
