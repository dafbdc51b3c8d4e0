"""Per-call overhead of the trampoline for a no-op hook, and the memory a confined child uses.

Besides the wall-clock time per call it reports the CPU time a call costs in all three
processes (the supervisor side, the fork server, the call's child): on a host shared with
other work, that is the figure that does not move with the load.

Run: .venv/bin/python benchmarks/bench_trampoline.py [--calls 300] [--mode require] [--unprivileged]
       [--apart-ms 0]
`--unprivileged` (start it as root) runs the whole supervisor side as an unused non-root uid,
the way a `systemctl --user` operator runs it. SPEC §11 target: median <= 12 ms per call at the
full tier, in both.

`--apart-ms N` leaves N ms between calls, as serve does (its hooks are separated by a round,
by git): the fork server then forks each call's child before the call comes. Back to back
(the default) it does that work while the next call waits.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from agent_runner.plugins.parent.sandbox import CallRequest, Sandbox

NOOP_PLUGIN = {
    "noop/__init__.py": b"""\
import resource
from agent_runner.plugins import PluginManifest, SpawnDecision

def noop(view):
    return SpawnDecision.proceed()

def peak(view):
    return SpawnDecision.skip(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))

PLUGIN = PluginManifest(name="noop", spawn_hooks=(noop, peak))
"""
}


@dataclass
class Trampoline:
    """One sandbox's figures: per-call times in ms, memory in KiB."""

    uid: int
    tier: str
    landlock_abi: int
    boot_ms: float
    calls_ms: list[float]
    child_peaks_kib: list[int]
    server_rss_kib: int
    cpu_ms_per_call: float = 0.0  # the supervisor side, the fork server and the calls' children


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _cpu_s(pid: int) -> float:
    """CPU time of `pid` and of the children it has reaped (utime, stime, cutime, cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(mode: str = "require", calls: int = 300, apart_ms: float = 0) -> Trampoline:
    """`calls` no-op hook calls through a sandbox started in this process."""
    events: list[tuple[str, dict[str, object]]] = []
    with Sandbox(mode, emit=lambda kind, **f: events.append((kind, f))) as sandbox:
        started = time.perf_counter()
        report = sandbox.start()
        boot_ms = (time.perf_counter() - started) * 1000
        noop = CallRequest("spawn", NOOP_PLUGIN, "noop:PLUGIN", "noop", {"round": 1})
        for _ in range(20):
            sandbox.call(noop)
        (server,) = sandbox.server_pids()
        cpu_before = _own_cpu_s() + _cpu_s(server)
        samples = []
        for _ in range(calls):
            time.sleep(apart_ms / 1000)
            started = time.perf_counter()
            result = sandbox.call(noop)
            samples.append((time.perf_counter() - started) * 1000)
            if result.status != "ok":
                raise SystemExit(f"a no-op call failed: {result}")
        cpu_ms = (_own_cpu_s() + _cpu_s(server) - cpu_before) * 1000 / calls
        peaks = []
        for _ in range(20):
            peak = sandbox.call(CallRequest("spawn", NOOP_PLUGIN, "noop:PLUGIN", "peak", {}))
            peaks.append(int(peak.value["reason"]))
        server_rss = _rss_kib(server)
    return Trampoline(
        os.getuid(), report.tier, report.landlock_abi, boot_ms, samples, peaks, server_rss, cpu_ms
    )


def measure_unprivileged(
    mode: str = "require", calls: int = 300, apart_ms: float = 0
) -> Trampoline:
    """`measure` with the whole supervisor side as an unused non-root uid (start as root)."""
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from tests import unprivileged  # noqa: PLC0415 - the test helper that drops to a uid

    argv = ["benchmarks/bench_trampoline.py", "--calls", str(calls), "--mode", mode, "--json"]
    argv += ["--apart-ms", str(apart_ms)]
    done = subprocess.run(
        unprivileged.command(*argv), cwd=repo, capture_output=True, text=True, check=True
    )
    return Trampoline(**json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--mode", choices=["require", "prefer", "off"], default="require")
    parser.add_argument("--unprivileged", action="store_true", help="run as an unused uid")
    parser.add_argument("--apart-ms", type=float, default=0, help="pause between calls")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")
    args = parser.parse_args()
    run = measure_unprivileged if args.unprivileged else measure
    figures = run(args.mode, args.calls, args.apart_ms)
    if args.json:
        print(json.dumps(asdict(figures)))
        return
    samples = sorted(figures.calls_ms)
    print(f"supervisor uid            {figures.uid}")
    print(f"tier                      {figures.tier} (landlock ABI {figures.landlock_abi})")
    print(f"boot (server + probe)     {figures.boot_ms:.1f} ms")
    print(f"calls                     {len(samples)}")
    print(f"per-call median           {statistics.median(samples):.2f} ms")
    print(f"per-call p90              {samples[int(len(samples) * 0.9)]:.2f} ms")
    print(f"per-call min              {samples[0]:.2f} ms")
    print(f"per-call CPU, 3 processes {figures.cpu_ms_per_call:.2f} ms")
    print(f"child peak RSS (median)   {statistics.median(figures.child_peaks_kib) / 1024:.1f} MiB")
    print(f"fork server RSS           {figures.server_rss_kib / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
