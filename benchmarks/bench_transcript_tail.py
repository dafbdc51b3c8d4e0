"""Parsing a 50 MB transcript: time and memory per parser stay bounded by the tail window.

Each transcript is 50 MB written for real (no holes): a real recorded failure repeated until
it fills the file, plus two hostile shapes (one 50 MB line; a flood of "{" that looks like
JSON). Prints the median parse time and the peak memory tracemalloc saw during one parse.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from agent_runner.parsers import TAIL_BYTES, parse_transcript

RUNS = 11
SIZE = 50 * 1024 * 1024
REAL = Path(__file__).parents[1] / "tests" / "fixtures" / "transcripts" / "real"
CASES = {
    "claude": "claude-2.1.332/server_error_at_budget.log",
    "codex": "codex-0.171.0/connection_refused.log",
    "gemini": "gemini-0.61.0/rate_limit.log",
    "aider": "aider-0.86.2/server_error.log",
}
HOSTILE = {
    "100 KB lines": b"x" * 100_000 + b"\n",
    "JSON-looking flood": b'{"a{"{"type":"result"' * 200 + b"\n",
}


def write(path: Path, unit: bytes) -> Path:
    with path.open("wb") as f:
        block = unit * max(1, (1 << 20) // len(unit))
        while f.tell() < SIZE:
            f.write(block)
    return path


def measure(parser: str, path: Path, runs: int = RUNS) -> tuple[list[float], float]:
    """Parse times of `path` in ms, once per run, and the peak MB traced during one parse."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        parse_transcript(parser, path, now=time.time(), exit_cause="timeout")
        samples.append((time.perf_counter() - start) * 1000)
    tracemalloc.start()
    parse_transcript(parser, path, now=time.time(), exit_cause="timeout")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return samples, peak / 1024 / 1024


def recorded_failure(parser: str, folder: Path) -> Path:
    """A 50 MB transcript for `parser`: a real recorded failure repeated until it is full."""
    return write(folder / f"{parser}.log", (REAL / CASES[parser]).read_bytes())


def main() -> None:
    print(f"50 MB transcripts, tail window {TAIL_BYTES // 1024} KiB, median of {RUNS}")
    print(f"{'parser':8} {'transcript':24} {'median':>10} {'peak mem':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for parser in CASES:
            rows = [("recorded failure x N", recorded_failure(parser, Path(tmp)))]
            for label, unit in HOSTILE.items():
                rows.append((label, write(Path(tmp) / f"{parser}-{len(rows)}.log", unit)))
            for label, transcript in rows:
                samples, mb = measure(parser, transcript)
                ms = statistics.median(samples)
                print(f"{parser:8} {label:24} {ms:8.2f}ms {mb:8.2f}MB")


if __name__ == "__main__":
    main()
