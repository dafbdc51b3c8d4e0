"""Restart latency (agent exit -> next agent exec) and the supervisor's cost while it waits.

Usage: python benchmarks/bench_restart.py [--rounds 200] [--wait-s 60] [--agent /bin/true]
       [--cgroup]   (a cgroup per round, as serve makes where the host allows; needs one)
       [--confine]  (also with `[agent] confine = "workdir"`, in alternating blocks: the
                     difference is what confinement adds; needs Landlock)
Prints medians; SPEC §11 asks for <= 20 ms, <= 0.05 s of CPU per 60 s wait, <= 40 MB RSS;
confinement should add under 2 ms. Each agent is started as serve starts it: from a gated
child started ahead (prefork.py).
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

from agent_runner.config import load_config
from agent_runner.supervisor.agent.cgroup import RoundCgroup, RoundCgroups, locate
from agent_runner.supervisor.agent.confinement import AgentConfinement
from agent_runner.supervisor.agent.prefork import Prefork
from agent_runner.supervisor.agent.process import AgentProcess, agent_environment, transcript_path
from agent_runner.supervisor.agent.strays import become_subreaper, reap_leftovers
from agent_runner.supervisor.agent.writepolicy import round_tmpdir


class Rounds:
    """Agents started the way serve starts them, with or without a cgroup per round, and
    confined by `confinement` when given."""

    def __init__(
        self,
        log_dir: Path,
        cgroups: RoundCgroups | None,
        confinement: AgentConfinement | None = None,
    ) -> None:
        self.log_dir, self.cgroups, self.confinement = log_dir, cgroups, confinement
        self.prefork = Prefork(landlock=confinement is not None)
        self.cgroup: RoundCgroup | None = None
        self.round_no = 0

    def spawn(self, argv: list[str], round_no: int) -> AgentProcess:
        transcript = transcript_path(self.log_dir, round_no)
        env = agent_environment({}, round_no=round_no, log_dir=self.log_dir, transcript=transcript)
        confined = None
        if self.confinement is not None:
            env["TMPDIR"] = str(round_tmpdir(self.log_dir, round_no))
            confined = self.confinement.enter(round_no)
        forked = self.prefork.take(round_no, self.cgroups, self.refused)
        self.cgroup, self.round_no = forked.cgroup, round_no
        agent = AgentProcess.spawn(
            argv,
            cwd=self.log_dir,
            env=env,
            stdin_data=b"do the work\n",
            transcript=transcript,
            child=forked.child,
            confine=confined.landlock if confined else None,
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
        if self.confinement is not None:
            self.confinement.leave(self.round_no)
        agent.result()

    def refused(self, reason: str) -> None:
        raise SystemExit(f"no cgroup per round here: {reason}")

    def close(self) -> None:
        self.prefork.close()
        if self.cgroups is not None:
            self.cgroups.close()
        if self.confinement is not None:
            self.confinement.close()


def restart_latencies_ms(
    argv: list[str], rounds: Rounds, count: int, first: int = 0
) -> list[float]:
    """From the moment an exit is seen to the next agent's exec, as the loop would do it."""
    latencies = []
    agent = rounds.spawn(argv, first)
    for round_no in range(first + 1, first + count + 1):
        agent.wait(None)
        exited = time.perf_counter()
        rounds.end(agent)
        agent = rounds.spawn(argv, round_no)  # returns once exec has succeeded
        latencies.append((time.perf_counter() - exited) * 1000)
    rounds.end(agent)
    return latencies


def confined(log_dir: Path) -> AgentConfinement:
    """The confinement serve prepares for `confine = "workdir"`, with log_dir as the work tree."""
    config_path = log_dir / "agent-runner.toml"
    config_path.write_text(
        'schema_version = 1\n[agent]\ncommand = ["true"]\nparser = "none"\n'
        f'confine = "workdir"\n[runtime]\nwork_dir = "{log_dir}"\nlog_dir = "{log_dir}"\n'
    )
    confinement = AgentConfinement.prepare(load_config(config_path), lambda *_a, **_f: None)
    if confinement is None:
        raise SystemExit("confinement was not prepared")
    return confinement


def compare_confined(
    argv: list[str], log_dir: Path, cgroups: RoundCgroups | None, count: int
) -> None:
    """Medians without and with confinement, measured in alternating blocks (same noise)."""
    confinement = confined(log_dir)
    tmpdir_ms = []
    for number in range(10_000, 11_000):
        started = time.perf_counter()
        confinement.enter(number)
        confinement.leave(number)
        tmpdir_ms.append((time.perf_counter() - started) * 1000)
    plain = Rounds(log_dir / "plain", cgroups)
    jailed = Rounds(log_dir, cgroups, confinement)
    off: list[float] = []
    on: list[float] = []
    block = count // 4
    for i in range(4):
        # Round numbers of their own: the children started ahead hold cgroups by number.
        off += restart_latencies_ms(argv, plain, block, first=2 * i * (block + 10))
        # The other side's reaping would take these children for leftovers: none wait now.
        plain.prefork.close()
        on += restart_latencies_ms(argv, jailed, block, first=(2 * i + 1) * (block + 10))
        jailed.prefork.close()
    plain.close()
    jailed.close()
    added = statistics.median(on) - statistics.median(off)
    print(
        f"restart latency over {len(off)} + {len(on)} rounds ({' '.join(argv)}): median "
        f"{statistics.median(off):.2f} ms unconfined, {statistics.median(on):.2f} ms with "
        f'confine = "workdir" ({added:+.2f} ms; p90 {statistics.quantiles(off, n=10)[-1]:.2f} '
        f"vs {statistics.quantiles(on, n=10)[-1]:.2f} ms); of that, making and removing the "
        f"round's TMPDIR: median {statistics.median(tmpdir_ms):.3f} ms"
    )


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
    parser.add_argument("--confine", action="store_true", help='also confine = "workdir"')
    args = parser.parse_args()
    become_subreaper()
    with tempfile.TemporaryDirectory() as tmp:
        cgroups = locate(f"bench-{os.getpid()}") if args.cgroup else None
        if args.confine:
            compare_confined(args.agent.split(), Path(tmp), cgroups, args.rounds)
            return
        rounds = Rounds(Path(tmp), cgroups)
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
