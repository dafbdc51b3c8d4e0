"""`peek --json` with 1,000 and 1,000,000 event lines on disk: medians (target <= 150 ms, and
the large log no more than 20 % slower than the small one), with bytecode as installed and,
for comparison, with agent-runner's modules compiled at each start (bench_cli.py).

The project has really run (a state.json from three rounds of the demo agent); the extra lines
are appended to its event log, so peek reads what it would read on a long-lived project.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomli_w
from bench_cli import timed_ms

CLI = Path(sys.executable).with_name("agent-runner")
RUNS = 9
LINE = '{"ts":"2026-11-30T18:41:30.033Z","event":"round_end","round":%d,"exit_cause":"clean","duration_s":1.5}\n'


def served_project(root: Path) -> Path:
    """A git work tree whose serve ran three rounds of the demo agent; its config's path."""
    work = root / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts" / "main.md").write_text("x\n")
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    config = {
        "schema_version": 1,
        "agent": {"preset": "demo"},
        "runtime": {"log_dir": str(root / "logs"), "restart_delay_s": 0, "max_rounds": 3},
    }
    path = work / "agent-runner.toml"
    path.write_text(tomli_w.dumps(config))
    subprocess.run([str(CLI), "serve", "--config", str(path)], check=True, capture_output=True)
    return path


def add_lines(log_dir: Path, lines: int) -> None:
    newest = sorted(log_dir.glob("events-*.jsonl"))[-1]
    with newest.open("a") as handle:
        for start in range(0, lines, 10_000):
            handle.write("".join(LINE % i for i in range(start, min(start + 10_000, lines))))


def median_ms(argv: list[str], *, codes: tuple[int, ...] = (0,)) -> float:
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, check=False)
        samples.append((time.perf_counter() - started) * 1000)
        assert done.returncode in codes, done.stderr
        json.loads(done.stdout)
    return statistics.median(samples)


def peek_ms(
    config: Path, runs: int = RUNS, *, source: bool = False
) -> tuple[list[float], list[float]]:
    """Wall and CPU time of `agent-runner peek --json`, in ms, once per run (`timed_ms`)."""
    argv = [str(CLI), "peek", "--json", "--config", str(config)]
    json.loads(subprocess.run(argv, check=True, capture_output=True).stdout)  # it answers JSON
    return timed_ms(argv, runs, source=source)


def peek_with_lines(
    lines: int, runs: int = RUNS, *, sources: tuple[bool, ...] = (False,)
) -> list[tuple[list[float], list[float]]]:
    """`peek_ms` on a project that ran, its event log grown to `lines` more events: once per
    item of `sources` (with bytecode, or compiled at each start)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = served_project(Path(tmp))
        add_lines(Path(tmp) / "logs", lines)
        return [peek_ms(config, runs, source=source) for source in sources]


if __name__ == "__main__":
    results = {}
    for lines in (1_000, 1_000_000):
        timed = peek_with_lines(lines, sources=(False, True))
        for (walls, cpus), how in zip(
            timed, ("with bytecode", "compiled at each start"), strict=True
        ):
            median, cpu = statistics.median(walls), statistics.median(cpus)
            print(
                f"peek --json with {lines:>9,} event lines, {how}: median {median:.1f} ms"
                f" ({cpu:.1f} ms CPU) over {RUNS} runs"
            )
        results[lines] = statistics.median(timed[0][0])
    print(f"ratio large/small (with bytecode): {results[1_000_000] / results[1_000]:.2f}")
