"""`agent-runner --help` and `--version` wall time: median of 15 runs (target <= 150 ms)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

CLI = Path(sys.executable).with_name("agent-runner")
RUNS = 15


def wall_ms(flag: str, runs: int = RUNS) -> list[float]:
    """Wall time of `agent-runner FLAG`, in ms, once per run."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(CLI), flag], check=True, capture_output=True)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


if __name__ == "__main__":
    for flag in ("--help", "--version"):
        median = statistics.median(wall_ms(flag))
        print(f"agent-runner {flag}: median {median:.1f} ms over {RUNS} runs")
