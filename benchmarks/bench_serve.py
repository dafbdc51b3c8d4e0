"""Serve end to end: restart latency, supervisor CPU and RSS during a round, stop latency.

Prints medians; asserts nothing. Usage: python benchmarks/bench_serve.py [round_seconds=60]
Targets (SPEC §11): restart <= 20 ms, CPU <= 0.05 s per 60 s round, RSS <= 40 MB, stop <= 0.3 s.
Restart latency is measured with a cgroup per round (run as root, or where systemd delegated
a cgroup; it says so when none could be had) and without one.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tomli_w

ROUNDS = 40
# An agent that works this long before it exits: time for the next round's child to be
# forked and moved into its cgroup ahead (with an agent that exits at once it cannot be).
AGENT_S = 0.2
STOP_RUNS = 5


def project(
    root: Path, command: list[str], git: bool, env: dict[str, str] | None = None, **runtime: object
) -> Path:
    """A throwaway project; `runtime` keys override (e.g. round_cgroup="off"); `env` is the
    agent's `[agent] env`."""
    work = root / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts" / "main.md").write_text("go\n")
    if git:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@b",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@b",
        }
        (work / ".gitignore").write_text("agent-runner.toml\nprompts/\n")
        for args in (["init", "-q"], ["add", ".gitignore"], ["commit", "-qm", "init"]):
            subprocess.run(["git", *args], cwd=work, check=True, env=env)
    config = work / "agent-runner.toml"
    config.write_text(
        tomli_w.dumps(
            {
                "schema_version": 1,
                "agent": {"command": command, "parser": "claude", "env": env or {}},
                "runtime": {"log_dir": str(root / "logs"), "restart_delay_s": 0, **runtime},
                "breakers": {"stalled_rounds": 10_000},
            }
        )
    )
    return config


def serve(config: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent_runner", "serve", "--config", str(config), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_event(log_dir: Path, kind: str, timeout: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(log_dir.glob("events-*.jsonl")):
            for line in path.read_text().splitlines():
                if f'"event":"{kind}"' in line:
                    return json.loads(line)
        time.sleep(0.01)
    raise SystemExit(f"no {kind} event")


def restart_gaps(
    git: bool, round_cgroup: str = "auto", agent_s: float = 0, rounds: int = ROUNDS
) -> tuple[list[float], str]:
    """Each agent exit -> next agent start of one serve, in ms; and "cgroup", "off", or why
    a cgroup per round was asked for and not had."""
    with tempfile.TemporaryDirectory() as tmp:
        stamps = Path(tmp) / "stamps"
        # The agent's only work: one timestamp as it starts and one as it exits, taken by
        # the shell itself ($EPOCHREALTIME, no `date` to start), so that the gap holds as
        # little of the agent's own start and exit as a shell can.
        pause = f"sleep {agent_s}; " if agent_s else ""
        script = (
            f"echo $EPOCHREALTIME >> {stamps}.start; {pause}echo $EPOCHREALTIME >> {stamps}.end"
        )
        config = project(
            Path(tmp),
            ["bash", "--norc", "--noprofile", "-c", script],
            git,
            env={"LC_ALL": "C"},  # $EPOCHREALTIME's decimal point is the locale's
            round_cgroup=round_cgroup,
        )
        proc = serve(config, "--max-rounds", str(rounds))
        proc.wait()
        # Read after the run: the events say whether it had a cgroup per round.
        reaping = cgroup_mode(Path(tmp) / "logs") if round_cgroup == "auto" else "off"
        return stamp_gaps(stamps), reaping


def stamp_gaps(stamps: Path) -> list[float]:
    """Each agent's end -> the next agent's start, in ms, from the stamps the agents wrote."""
    starts = [float(x) for x in Path(f"{stamps}.start").read_text().split()]
    ends = [float(x) for x in Path(f"{stamps}.end").read_text().split()]
    return [(starts[i + 1] - ends[i]) * 1000 for i in range(len(starts) - 1)]


def cgroup_mode(log_dir: Path) -> str:
    """`cgroup` when the run had a cgroup per round, else why not."""
    for path in sorted(log_dir.glob("events-*.jsonl")):
        for line in path.read_text().splitlines():
            if '"event":"round_cgroup_unavailable"' in line:
                return str(json.loads(line)["reason"])
    return "cgroup"


def cpu_and_rss(round_s: float) -> tuple[float, float]:
    """serve's CPU seconds while one agent runs for `round_s`, and its peak RSS in MB."""
    with tempfile.TemporaryDirectory() as tmp:
        config = project(Path(tmp), ["sleep", str(round_s)], git=True)
        proc = serve(config, "--max-rounds", "1")
        wait_event(Path(tmp) / "logs", "agent_spawn")
        before = _cpu_s(proc.pid)
        time.sleep(round_s - 1)
        after = _cpu_s(proc.pid)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        hwm = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        rss_kib = int(hwm.split()[1])
        proc.wait()
        return after - before, rss_kib / 1024


def stop_latencies(runs: int = STOP_RUNS) -> list[float]:
    """SIGTERM -> serve's exit during a back-off, in ms, once per run."""
    samples = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            agent = Path(__file__).parents[1] / "tests" / "agents" / "rate_limited.py"
            config = project(Path(tmp), [sys.executable, str(agent), "3600"], git=False)
            proc = serve(config)
            wait_event(Path(tmp) / "logs", "backoff_wait")
            time.sleep(0.2)
            started = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            samples.append((time.perf_counter() - started) * 1000)
    return samples


def _cpu_s(pid: int) -> float:
    """CPU time of every thread of `pid`, to the nanosecond (stat's ticks are 10 ms)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except OSError:
            continue  # a thread that ended meanwhile
    return total / 1e9


if __name__ == "__main__":
    round_s = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    for git, round_cgroup, agent_s, label in (
        (False, "off", 0, "no git, no cgroup"),
        (True, "off", 0, "git tree, no cgroup"),
        (False, "auto", 0, "no git, cgroup per round"),
        (True, "auto", 0, "git tree, cgroup per round"),
        (True, "off", AGENT_S, f"git, no cgroup, {AGENT_S:g} s agent"),
        (True, "auto", AGENT_S, f"git, cgroup, {AGENT_S:g} s agent"),
    ):
        gaps, reaping = restart_gaps(git, round_cgroup, agent_s)
        if reaping not in ("off", "cgroup"):
            print(f"  (asked for a cgroup per round, got none: {reaping})")
        latency = statistics.median(gaps)
        print(f"restart latency, {label + ':':<32} median {latency:.1f} ms over {ROUNDS} rounds")
    stop = statistics.median(stop_latencies())
    print(f"stop latency in back-off:  median {stop:.0f} ms over {STOP_RUNS} runs")
    cpu, rss = cpu_and_rss(round_s)
    print(f"supervisor during a {round_s:g} s round: CPU {cpu:.3f} s, peak RSS {rss:.1f} MB")
