"""`agent-runner --help` and `--version` wall time: median of 15 runs (target <= 150 ms).

Every command these benchmarks time runs as an installed agent-runner runs: with each module's
bytecode compiled once, as pip compiles a wheel's at install, not compiled again at every
start. `from_source` is the other case, a checkout where no bytecode can be written.
"""

from __future__ import annotations

import atexit
import functools
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import agent_runner

CLI = Path(sys.executable).with_name("agent-runner")
RUNS = 15


@functools.cache
def _scratch() -> Path:
    """This run's bytecode cache and package copy; removed when the benchmark exits."""
    folder = Path(tempfile.mkdtemp(prefix="agent-runner-bench-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def with_bytecode(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` with bytecode written and read in a cache of the benchmark's own, so that a
    checkout that may not write it (PYTHONDONTWRITEBYTECODE) is timed as an install is."""
    base = dict(os.environ if env is None else env)
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    return {**base, "PYTHONPYCACHEPREFIX": str(_scratch() / "bytecode")}


def from_source(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` in which agent-runner's own modules are compiled at every start (a copy of the
    package with no bytecode, first on the path); the standard library's and click's are
    used as installed."""
    copy = _scratch() / "source"
    if not copy.exists():
        package = Path(agent_runner.__file__).parent
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(package, copy / "agent_runner", ignore=ignore)
    base = dict(os.environ if env is None else env)
    return {**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(copy)}


def timed_ms(
    argv: list[str], runs: int, env: Mapping[str, str] | None = None, *, source: bool = False
) -> tuple[list[float], list[float]]:
    """Wall time and CPU time (user + system) of the command `argv`, in ms, once per run
    after one untimed run: `with_bytecode(env)`, or `from_source(env)` when `source`.

    On a host shared with other work the wall time includes waiting for a CPU; the CPU time
    does not, and bounds what the wall time would be on an idle host.
    """
    run_env = from_source(env) if source else with_bytecode(env)
    subprocess.run(argv, check=True, capture_output=True, env=run_env)  # fills the cache
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, env=run_env)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        cpus.append(cpu * 1000)
    return walls, cpus


def wall_ms(
    flag: str, runs: int = RUNS, *, source: bool = False
) -> tuple[list[float], list[float]]:
    """`timed_ms` of `agent-runner FLAG`."""
    return timed_ms([str(CLI), flag], runs, source=source)


if __name__ == "__main__":
    for flag in ("--help", "--version"):
        for source, how in ((False, "with bytecode"), (True, "compiled at each start")):
            walls, cpus = wall_ms(flag, source=source)
            median, cpu = statistics.median(walls), statistics.median(cpus)
            print(
                f"agent-runner {flag}, {how}: median {median:.1f} ms ({cpu:.1f} ms CPU)"
                f" over {RUNS} runs"
            )
