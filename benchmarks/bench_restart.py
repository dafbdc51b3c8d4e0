"""Restart latency (agent exit -> next agent exec) and the supervisor's cost while it waits.

Usage: python benchmarks/bench_restart.py [--rounds 200] [--wait-s 60] [--agent /bin/true]
Prints medians; SPEC §11 asks for <= 20 ms, <= 0.05 s of CPU per 60 s wait, <= 40 MB RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_runner.supervisor.process import AgentProcess, agent_environment, transcript_path
from agent_runner.supervisor.strays import become_subreaper, reap_leftovers


def spawn(argv: list[str], log_dir: Path, round_no: int) -> AgentProcess:
    transcript = transcript_path(log_dir, round_no)
    env = agent_environment({}, round_no=round_no, log_dir=log_dir, transcript=transcript)
    return AgentProcess.spawn(
        argv, cwd=log_dir, env=env, stdin_data=b"do the work\n", transcript=transcript
    )


def restart_latencies_ms(argv: list[str], log_dir: Path, rounds: int) -> list[float]:
    """From the moment an exit is seen to the next agent's exec, as the loop would do it."""
    latencies = []
    agent = spawn(argv, log_dir, 0)
    for round_no in range(1, rounds + 1):
        agent.wait(None)
        exited = time.perf_counter()
        reap_leftovers()
        agent.result()
        agent = spawn(argv, log_dir, round_no)  # returns once exec has succeeded
        latencies.append((time.perf_counter() - exited) * 1000)
    agent.wait(None)
    reap_leftovers()
    return latencies


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def waiting_cost(log_dir: Path, wait_s: float) -> tuple[float, float, float]:
    """CPU seconds, current and peak RSS (MB) of this process over one round of a `wait_s` agent."""
    before = cpu_s()
    agent = spawn(["sleep", str(wait_s)], log_dir, 1_000_000)
    agent.wait(None)
    reap_leftovers()
    agent.result()
    return cpu_s() - before, rss_mb("VmRSS"), rss_mb("VmHWM")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--wait-s", type=float, default=60.0)
    parser.add_argument("--agent", default="/bin/true", help="command run each round")
    args = parser.parse_args()
    become_subreaper()
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp)
        lat = restart_latencies_ms(args.agent.split(), log_dir, args.rounds)
        median, p90 = statistics.median(lat), statistics.quantiles(lat, n=10)[-1]
        print(
            f"restart latency over {len(lat)} rounds ({args.agent}): median {median:.2f} ms, "
            f"p90 {p90:.2f} ms, max {max(lat):.2f} ms"
        )
        cpu, rss, hwm = waiting_cost(log_dir, args.wait_s)
        print(
            f"while waiting {args.wait_s:g} s: supervisor CPU {cpu:.4f} s, RSS {rss:.1f} MB "
            f"(peak {hwm:.1f} MB), pid {os.getpid()}"
        )


if __name__ == "__main__":
    main()
