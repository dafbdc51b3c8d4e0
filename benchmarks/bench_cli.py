"""`agent-runner --help` and `--version` wall time: median of 15 runs (target <= 150 ms)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

CLI = Path(sys.executable).with_name("agent-runner")
RUNS = 15


def median_ms(argv: list[str]) -> float:
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


if __name__ == "__main__":
    for flag in ("--help", "--version"):
        print(f"agent-runner {flag}: median {median_ms([str(CLI), flag]):.1f} ms over {RUNS} runs")
