"""Transcript parse time for 2 KB, 1 MB and 2 GB (sparse) transcripts, per parser: medians.

Only the last TAIL_BYTES are read, so 1 MB and 2 GB should cost the same; 2 KB is
cheaper only because its whole file is smaller than that window.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from agent_runner.parsers import parse_transcript

RUNS = 21
FIXTURES = Path(__file__).parents[1] / "tests" / "fixtures" / "transcripts"
CASES = {
    "claude": FIXTURES / "claude" / "rate_limit_five_hour.jsonl",
    "codex": FIXTURES / "codex" / "usage_limit_relative.jsonl",
    "gemini": FIXTURES / "gemini" / "success.json",
    "aider": FIXTURES / "aider" / "success.log",
}


FILLER = b'{"type":"assistant","message":{"content":[{"type":"text","text":"working"}]}}\n'
SIZES = {"2 KB": 2048, "1 MB": 1 << 20, "2 GB": 2 * 1024**3}


def make_transcript(folder: Path, name: str, tail: bytes, size: int, filler: bytes) -> Path:
    path = folder / name
    with path.open("wb") as f:
        if size > 1 << 21:
            f.truncate(size)  # holes: a 2 GB file that costs no disk
            f.seek(0, 2)
            f.write(b"\n" + filler * (300_000 // len(filler)))  # a realistic, full tail window
        else:
            f.write(filler * max(0, (size - len(tail)) // len(filler)))
        f.write(tail)
    return path


def parse_ms(parser: str, path: Path, runs: int = RUNS) -> list[float]:
    """Parse times of `path` in ms, once per run."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        parse_transcript(parser, path, now=time.time())
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"{'parser':8}" + "".join(f"{label:>11}" for label in SIZES))
        for parser, fixture in CASES.items():
            tail = fixture.read_bytes()
            cells = []
            for label, size in SIZES.items():
                path = make_transcript(folder, f"{parser}-{label}", tail, size, FILLER)
                cells.append(f"{statistics.median(parse_ms(parser, path)):9.2f}ms")
            print(f"{parser:8}" + "".join(cells))


if __name__ == "__main__":
    main()
