"""The real CLI with a wall clock 30 days behind until the file $CLOCK_FIXED_WHEN exists.

Usage: python skewed_clock_cli.py CLI-ARGS...
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from agent_runner.clock import Clock

SKEW_S = 30 * 86_400


def _skewed_now(_self: Clock) -> float:
    fixed = Path(os.environ["CLOCK_FIXED_WHEN"]).exists()
    return time.time() - (0 if fixed else SKEW_S)


if __name__ == "__main__":
    Clock.now = _skewed_now
    from agent_runner.cli import run

    sys.exit(run(sys.argv[1:]))
