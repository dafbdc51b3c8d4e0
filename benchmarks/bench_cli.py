"""`agent-runner --help` and `--version` wall time: median of 15 runs (target <= 150 ms)."""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

CLI = Path(sys.executable).with_name("agent-runner")
RUNS = 15


def timed_ms(
    argv: list[str], runs: int, env: dict[str, str] | None = None
) -> tuple[list[float], list[float]]:
    """Wall time and CPU time (user + system) of the command `argv`, in ms, once per run.

    On a host shared with other work the wall time includes waiting for a CPU; the CPU time
    does not, and bounds what the wall time would be on an idle host.
    """
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=env)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cpus.append(cpu * 1000)
    return walls, cpus


def wall_ms(flag: str, runs: int = RUNS) -> tuple[list[float], list[float]]:
    """`timed_ms` of `agent-runner FLAG`."""
    return timed_ms([str(CLI), flag], runs)


if __name__ == "__main__":
    for flag in ("--help", "--version"):
        walls, cpus = wall_ms(flag)
        median, cpu = statistics.median(walls), statistics.median(cpus)
        print(f"agent-runner {flag}: median {median:.1f} ms ({cpu:.1f} ms CPU) over {RUNS} runs")
