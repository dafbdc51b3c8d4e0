"""A thousand fast rounds of a real serve: every round fully evented, nothing left behind,
descriptors and memory flat."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import tomli_w

from agent_runner.events import iter_events, tail_events

ROUNDS = 1000


def sample(pid: int) -> tuple[int, int]:
    """Open descriptors and resident memory (KiB) of a running process."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return fds, rss


def agents_of(log_dir: Path) -> list[int]:
    """Live processes started by a serve for this log_dir (they carry it in their environment)."""
    marker = f"AGENT_RUNNER_LOG_DIR={log_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                found.append(int(entry))
    return found


def test_a_thousand_rounds_leave_nothing_behind(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts" / "main.md").write_text("go\n")
    config_path = work / "agent-runner.toml"
    log_dir = tmp_path / "logs"
    config_path.write_text(
        tomli_w.dumps(
            {
                "schema_version": 1,
                "agent": {"command": ["true"], "parser": "none"},
                "runtime": {"log_dir": str(log_dir), "restart_delay_s": 0},
                "breakers": {"stalled_rounds": 10_000},
            }
        )
    )
    serve = subprocess.Popen(
        [sys.executable, "-m", "agent_runner", "serve", "--max-rounds", str(ROUNDS)],
        cwd=work,
        stderr=subprocess.DEVNULL,
    )
    # Descriptors and memory vary with the phase a sample lands in (mid-spawn, mid-write),
    # so compare the worst of many early samples with the worst of many late ones.
    samples: dict[str, list[tuple[int, int]]] = {"early": [], "late": []}
    deadline = time.monotonic() + 120
    while serve.poll() is None and time.monotonic() < deadline:
        last = tail_events(log_dir, 1)
        done = last[0].get("round", 0) if last else 0
        try:
            if 100 <= done < 400:
                samples["early"].append(sample(serve.pid))
            elif done >= 700:
                samples["late"].append(sample(serve.pid))
        except (FileNotFoundError, StopIteration):
            break  # serve exited between the check and the sample
        time.sleep(0.005)
    assert serve.wait(timeout=60) == 0
    assert agents_of(log_dir) == []
    kinds: dict[str, list[int]] = {}
    for event in iter_events(log_dir):
        if "round" in event:
            kinds.setdefault(event["event"], []).append(event["round"])
    expected = list(range(1, ROUNDS + 1))
    for kind in ("round_start", "agent_spawn", "agent_exit", "round_end"):
        assert kinds[kind] == expected, kind
    assert len(samples["early"]) >= 5 and len(samples["late"]) >= 5, samples
    fds_early = max(fds for fds, _ in samples["early"])
    fds_late = max(fds for fds, _ in samples["late"])
    assert fds_late <= fds_early, f"descriptors grew from {fds_early} to {fds_late}"
    rss_early = max(rss for _, rss in samples["early"])
    rss_late = max(rss for _, rss in samples["late"])
    assert rss_late - rss_early < 4 * 1024, f"RSS grew from {rss_early} to {rss_late} KiB"
