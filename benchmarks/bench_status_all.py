"""`status --all --json` over 100 projects: medians of the whole command (interpreter start
included) and of the listing alone. Prints; asserts nothing.

Each project has what a serve that ran for a day leaves: a state.json with a full spend
ledger (a round every minute), a serve.pid of a process that is gone, and a lock file;
ten of them also have an installed unit whose config names its log_dir.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomli_w
from bench_cli import timed_ms

from agent_runner.supervisor.loop.budget import DAY_S, Ledger
from agent_runner.systemd.names import unit_name

PROJECTS = 100
UNITS = 10
RUNS = 9


def make_host(root: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "config"),
    }
    now = time.time()
    ledger = Ledger()
    for minute in range(1440):
        ledger = ledger.record(
            now - DAY_S + 60 * (minute + 1), rounds=1, tokens=1200, cost_usd=0.01
        )
    for n in range(PROJECTS):
        work = root / "work" / f"project{n}"
        (work / "prompts").mkdir(parents=True)
        (work / "prompts" / "main.md").write_text("go\n")
        log_dir = root / "state" / "agent-runner" / f"project{n}-{n:08x}"
        log_dir.mkdir(parents=True)
        state = {
            "supervisor": {"pid": 999_999, "phase": "stopped", "started_at": now - 3600},
            "project": {"work_dir": str(work), "config": str(work / "agent-runner.toml")},
            "last_round": {
                "round": 1440,
                "exit_code": 0,
                "exit_cause": "clean",
                "duration_s": 30.0,
            },
            "last_round_number": 1440,
            "rounds_run": 1440,
            "loop": {"failures": 0, "backoff_until": now + 600 if n % 7 == 0 else None},
            "budget": ledger.to_state(),
            "phase_detail": {},
            "round": None,
        }
        (log_dir / "state.json").write_text(json.dumps(state))
        (log_dir / "serve.pid").write_text(json.dumps({"pid": 999_999, "start_ticks": 1}))
        (log_dir / "serve.lock").write_text("")
        config = {
            "schema_version": 1,
            "agent": {"preset": "demo"},
            "runtime": {"log_dir": str(log_dir)},
        }
        (work / "agent-runner.toml").write_text(tomli_w.dumps(config))
        if n < UNITS:
            dropin = (
                root
                / "config"
                / "systemd"
                / "user"
                / f"{unit_name(str(work))}.d"
                / "agent-runner.conf"
            )
            dropin.parent.mkdir(parents=True)
            dropin.write_text("[Service]\n")
    return env


def command_ms(env: dict[str, str], runs: int = RUNS) -> tuple[list[float], list[float]]:
    """Wall and CPU time of `status --all --json` on the host `make_host` made, in ms."""
    argv = [str(Path(sys.executable).with_name("agent-runner")), "status", "--all", "--json"]
    out = subprocess.run(argv, env=env, check=True, capture_output=True)
    listed = len(json.loads(out.stdout)["projects"])
    if listed != PROJECTS:
        raise SystemExit(f"status --all listed {listed} projects of {PROJECTS}")
    return timed_ms(argv, runs, env)


def listing_ms(env: dict[str, str]) -> float:
    code = (
        "import time, statistics; from agent_runner.observe.host import host_report; s=[]\n"
        f"for _ in range({RUNS}):\n"
        "    t=time.perf_counter(); host_report(); s.append((time.perf_counter()-t)*1000)\n"
        "print(statistics.median(s))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return float(out.stdout)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        env = make_host(Path(tmp))
        print(
            f"status --all --json, {PROJECTS} projects ({UNITS} with a unit): median {statistics.median(command_ms(env)[0]):.0f} ms over {RUNS} runs"
        )
        print(f"  of which the listing itself: median {listing_ms(env):.0f} ms")
