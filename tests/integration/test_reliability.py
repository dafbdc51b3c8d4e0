"""A thousand fast rounds: every round fully evented, nothing left behind, resources flat."""

from __future__ import annotations

import json
import os
from pathlib import Path

import tomli_w

from agent_runner.config import load_config
from agent_runner.events import iter_events
from agent_runner.supervisor.serve import run_serve

ROUNDS = 1000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def children() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(entry))
    return found


def test_a_thousand_rounds_leave_nothing_behind(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts" / "main.md").write_text("go\n")
    config_path = work / "agent-runner.toml"
    config_path.write_text(
        tomli_w.dumps(
            {
                "schema_version": 1,
                "agent": {"command": ["true"], "parser": "none"},
                "runtime": {"log_dir": str(tmp_path / "logs"), "restart_delay_s": 0},
                "breakers": {"stalled_rounds": 10_000},
            }
        )
    )
    samples: dict[int, tuple[int, int]] = {}

    def watch(line: str) -> None:
        event = json.loads(line)
        if event["event"] == "round_end" and event["round"] in (100, ROUNDS):
            samples[event["round"]] = (open_fds(), rss_kib())

    fds_before = open_fds()
    code = run_serve(load_config(config_path), max_rounds=ROUNDS, echo=watch)
    assert code == 0
    kinds: dict[str, list[int]] = {}
    for event in iter_events(tmp_path / "logs"):
        if "round" in event:
            kinds.setdefault(event["event"], []).append(event["round"])
    expected = list(range(1, ROUNDS + 1))
    for kind in ("round_start", "agent_spawn", "agent_exit", "round_end"):
        assert kinds[kind] == expected, kind
    assert children() == []
    assert open_fds() == fds_before
    fds_100, rss_100 = samples[100]
    fds_end, rss_end = samples[ROUNDS]
    assert fds_end == fds_100
    assert rss_end - rss_100 < 4 * 1024, f"RSS grew from {rss_100} to {rss_end} KiB"
