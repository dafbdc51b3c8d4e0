"""Restart latency (agent exit -> next agent exec) and the supervisor's cost while it waits.

Usage: python benchmarks/bench_restart.py [--rounds 200] [--wait-s 60] [--agent /bin/true]
       [--cgroup]   (a cgroup per round, as serve makes where the host allows; needs one)
Prints medians; SPEC §11 asks for <= 20 ms, <= 0.05 s of CPU per 60 s wait, <= 40 MB RSS.
Each agent is started as serve starts it: from a gated child started ahead (prefork.py).
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

from agent_runner.supervisor.cgroup import RoundCgroups, locate
from agent_runner.supervisor.prefork import Prefork
from agent_runner.supervisor.process import AgentProcess, agent_environment, transcript_path
from agent_runner.supervisor.strays import become_subreaper, reap_leftovers


class Rounds:
    """Agents started the way serve starts them, with or without a cgroup per round."""

    def __init__(self, log_dir: Path, cgroups: RoundCgroups | None) -> None:
        self.log_dir, self.cgroups, self.prefork = log_dir, cgroups, Prefork()
        self.cgroup = None

    def spawn(self, argv: list[str], round_no: int) -> AgentProcess:
        transcript = transcript_path(self.log_dir, round_no)
        env = agent_environment({}, round_no=round_no, log_dir=self.log_dir, transcript=transcript)
        forked = self.prefork.take(round_no, self.cgroups, self.refused)
        self.cgroup = forked.cgroup
        agent = AgentProcess.spawn(
            argv,
            cwd=self.log_dir,
            env=env,
            stdin_data=b"do the work\n",
            transcript=transcript,
            child=forked.child,
        )
        self.prefork.prepare(round_no, self.cgroups, self.refused)
        return agent

    def end(self, agent: AgentProcess) -> None:
        """What serve does after each exit: kill the cgroup, reap, read the usage."""
        agent.wait(None)
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.usage()
            self.cgroup.remove()
        reap_leftovers(keep=self.prefork.pids())
        agent.result()

    def refused(self, reason: str) -> None:
        raise SystemExit(f"no cgroup per round here: {reason}")

    def close(self) -> None:
        self.prefork.close()
        if self.cgroups is not None:
            self.cgroups.close()


def restart_latencies_ms(argv: list[str], rounds: Rounds, count: int) -> list[float]:
    """From the moment an exit is seen to the next agent's exec, as the loop would do it."""
    latencies = []
    agent = rounds.spawn(argv, 0)
    for round_no in range(1, count + 1):
        agent.wait(None)
        exited = time.perf_counter()
        rounds.end(agent)
        agent = rounds.spawn(argv, round_no)  # returns once exec has succeeded
        latencies.append((time.perf_counter() - exited) * 1000)
    rounds.end(agent)
    return latencies


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def waiting_cost(rounds: Rounds, wait_s: float) -> tuple[float, float, float]:
    """CPU seconds, current and peak RSS (MB) of this process over one round of a `wait_s` agent."""
    before = cpu_s()
    agent = rounds.spawn(["sleep", str(wait_s)], 1_000_000)
    rounds.end(agent)
    return cpu_s() - before, rss_mb("VmRSS"), rss_mb("VmHWM")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--wait-s", type=float, default=60.0)
    parser.add_argument("--agent", default="/bin/true", help="command run each round")
    parser.add_argument("--cgroup", action="store_true", help="a cgroup per round")
    args = parser.parse_args()
    become_subreaper()
    with tempfile.TemporaryDirectory() as tmp:
        rounds = Rounds(Path(tmp), locate(f"bench-{os.getpid()}") if args.cgroup else None)
        lat = restart_latencies_ms(args.agent.split(), rounds, args.rounds)
        median, p90 = statistics.median(lat), statistics.quantiles(lat, n=10)[-1]
        where = "a cgroup per round" if args.cgroup else "no cgroup"
        print(
            f"restart latency over {len(lat)} rounds ({args.agent}, {where}): median "
            f"{median:.2f} ms, p90 {p90:.2f} ms, max {max(lat):.2f} ms"
        )
        cpu, rss, hwm = waiting_cost(rounds, args.wait_s)
        rounds.close()
        print(
            f"while waiting {args.wait_s:g} s: supervisor CPU {cpu:.4f} s, RSS {rss:.1f} MB "
            f"(peak {hwm:.1f} MB), pid {os.getpid()}"
        )


if __name__ == "__main__":
    main()
