"""`peek --json` with 1,000 and 1,000,000 event lines on disk: medians (target <= 150 ms, and
the large log no more than 20 % slower than the small one)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import tomli_w
from bench_cli import timed_ms

RUNS = 9
LINE = '{"ts":"2026-11-30T18:41:30.033Z","event":"round_end","round":%d,"exit_cause":"clean","duration_s":1.5}\n'


def make_project(root: Path, lines: int) -> Path:
    log_dir = root / "logs"
    log_dir.mkdir()
    with open(log_dir / "events-2026-11.jsonl", "w") as handle:
        for start in range(0, lines, 10_000):
            handle.write("".join(LINE % i for i in range(start, min(start + 10_000, lines))))
    (root / "prompts").mkdir()
    (root / "prompts" / "main.md").write_text("x\n")
    config = {
        "schema_version": 1,
        "agent": {"preset": "demo"},
        "runtime": {"log_dir": str(log_dir)},
    }
    path = root / "agent-runner.toml"
    path.write_text(tomli_w.dumps(config))
    return path


def peek_ms(config: Path, runs: int = RUNS) -> tuple[list[float], list[float]]:
    """Wall and CPU time of `agent-runner peek --json`, in ms, once per run."""
    cli = Path(sys.executable).with_name("agent-runner")
    argv = [str(cli), "peek", "--json", "--config", str(config)]
    json.loads(subprocess.run(argv, check=True, capture_output=True).stdout)  # it answers JSON
    return timed_ms(argv, runs)


def peek_with_lines(lines: int, runs: int = RUNS) -> tuple[list[float], list[float]]:
    """`peek_ms` over a log of `lines` events."""
    with tempfile.TemporaryDirectory() as tmp:
        return peek_ms(make_project(Path(tmp), lines), runs)


if __name__ == "__main__":
    results = {}
    for lines in (1_000, 1_000_000):
        results[lines] = statistics.median(peek_with_lines(lines)[0])
        print(
            f"peek --json with {lines:>9,} event lines: median {results[lines]:.1f} ms over {RUNS} runs"
        )
    print(f"ratio large/small: {results[1_000_000] / results[1_000]:.2f}")
