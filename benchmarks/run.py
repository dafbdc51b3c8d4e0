"""Every figure the benchmarks measure, in one table: median, min and max beside the targets.

Usage: python benchmarks/run.py [--cpu-round-s 60] [--quick] [--only restart,cpu,...]
(`make bench` runs them all)
Asserts nothing and exits 0 whatever the figures; progress goes to stderr, the table to
stdout. Targets marked §11 are SPEC §11's; the others are this project's own. Takes a few
minutes: one serve waits out a 60 s round for the CPU figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bench_budget
import bench_cli
import bench_memory
import bench_parsers
import bench_peek
import bench_plugin_boot
import bench_plugin_hooks
import bench_serve
import bench_status_all
import bench_trampoline
import bench_transcript_tail


@dataclass(frozen=True)
class Figure:
    """One row: samples in `unit`, and the bound they are held to (None: no target)."""

    name: str
    unit: str
    samples: tuple[float, ...]
    limit: float | None = None
    source: str = ""  # "§11", or "" for this project's own target
    note: str = ""

    def __post_init__(self) -> None:
        if not self.samples or not all(isinstance(v, int | float) for v in self.samples):
            raise TypeError(f"{self.name}: samples must be numbers, not {self.samples!r:.80}")

    def verdict(self) -> str:
        if self.limit is None:
            return ""
        return "ok" if statistics.median(self.samples) <= self.limit else "MISSED"


def progress(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def cli_figures(quick: bool) -> list[Figure]:
    progress("agent-runner --help")
    runs = 5 if quick else bench_cli.RUNS
    walls, cpus = bench_cli.wall_ms("--help", runs)
    source, source_cpus = bench_cli.wall_ms("--help", runs, source=True)
    return [
        Figure("agent-runner --help", "ms", tuple(walls), 150, "§11"),
        Figure("agent-runner --help, CPU time", "ms", tuple(cpus), note="user + system"),
        Figure(
            "agent-runner --help, compiled at each start",
            "ms",
            tuple(source),
            note=f"no bytecode; CPU {statistics.median(source_cpus):.1f} ms",
        ),
    ]


def restart_figures(quick: bool) -> list[Figure]:
    rounds = 15 if quick else bench_serve.ROUNDS
    figures = []
    for round_cgroup, agent_s, label in (
        ("off", 0, "restart latency, agent exits at once, no cgroup"),
        ("auto", 0, "restart latency, agent exits at once, cgroup per round"),
        ("auto", bench_serve.AGENT_S, "restart latency, 0.2 s agent, cgroup per round"),
    ):
        progress(label)
        gaps, reaping = bench_serve.restart_gaps(True, round_cgroup, agent_s, rounds)
        note = "" if reaping in ("off", "cgroup") else f"no cgroup: {reaping}"
        figures.append(Figure(label, "ms", tuple(gaps), 20, "§11", note))
    progress("stop latency during a back-off")
    stops = bench_serve.stop_latencies(3 if quick else bench_serve.STOP_RUNS)
    figures.append(Figure("stop latency during a back-off", "ms", tuple(stops), 300, "§11"))
    return figures


def cpu_figures(round_s: float) -> list[Figure]:
    progress(f"supervisor CPU while an agent runs {round_s:g} s")
    cpu, _ = bench_serve.cpu_and_rss(round_s)
    per_60_s = cpu * 60 / (round_s - 1)  # measured over round_s - 1 seconds of the round
    note = "" if round_s == 60 else f"measured over {round_s - 1:g} s, scaled"
    return [
        Figure("supervisor CPU per 60 s of a running agent", "s", (per_60_s,), 0.05, "§11", note)
    ]


def memory_figures(quick: bool) -> list[Figure]:
    runs = 1 if quick else 3
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        bench_plugin_hooks.install_example(site)
        for label, plugins in (("no third-party plugin", None), ("the example plugin", site)):
            progress(f"supervisor tree memory, {label}")
            peaks = [bench_memory.serve_memory(plugins, rounds=2, agent_s=1.5) for _ in range(runs)]
            exact = peaks[0].tree is not None
            tree = [(p.tree if p.tree is not None else p.pss) / 1024 for p in peaks]
            measure = "distinct pages" if exact else "PSS (no pagemap)"
            helpers = ", ".join(f"{n} {kind}" for kind, n in sorted(peaks[-1].helpers.items()))
            figures += [
                Figure(
                    f"serve's peak RSS, {label}",
                    "MB",
                    tuple(p.serve_hwm / 1024 for p in peaks),
                    40,
                    "§11",
                ),
                Figure(f"serve's tree, {measure}, {label}", "MB", tuple(tree), 40, "", helpers),
                Figure(f"serve's tree, PSS, {label}", "MB", tuple(p.pss / 1024 for p in peaks), 40),
            ]
    return figures


def trampoline_figures(quick: bool) -> list[Figure]:
    calls = 100 if quick else 300
    figures = []
    runs: list[tuple[str, Callable[[str, int], bench_trampoline.Trampoline]]] = [
        ("root", bench_trampoline.measure)
    ]
    if os.geteuid() == 0:
        runs.append(("an unused uid", bench_trampoline.measure_unprivileged))
    for who, measure in runs:
        progress(f"trampoline per call, supervisor as {who}")
        result = measure("require", calls)
        figures.append(
            Figure(
                f"trampoline per no-op call, supervisor as {who}",
                "ms",
                tuple(result.calls_ms),
                12,
                "§11",
                f"tier {result.tier}, fork server RSS {result.server_rss_kib / 1024:.1f} MB",
            )
        )
        figures.append(
            Figure(
                f"trampoline CPU time per call, supervisor as {who}",
                "ms",
                (result.cpu_ms_per_call,),
                note="supervisor side + fork server + child",
            )
        )
    progress("trampoline per call, 50 ms apart, supervisor as root")
    apart = bench_trampoline.measure("require", calls, apart_ms=50)
    figures.append(
        Figure(
            "trampoline per no-op call, 50 ms apart, as root",
            "ms",
            tuple(apart.calls_ms),
            12,
            "§11",
            "as serve calls hooks: each call's child forked before it",
        )
    )
    return figures


def plugin_boot_figures(quick: bool) -> list[Figure]:
    runs = 5 if quick else 9
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for count in bench_plugin_boot.COUNTS:
            progress(f"serve boot with {count} plugins")
            site = bench_plugin_boot.install(count, root)
            boots = bench_plugin_boot.serve_boot(site, root / f"project-{count}", runs)
            figures.append(
                Figure(f"serve launch -> serve_start, {count} plugins", "ms", tuple(boots))
            )
            if count == max(bench_plugin_boot.COUNTS):
                admitted = bench_plugin_boot.in_process(site, runs)
                note = f"{admitted.admitted} admitted, after the sandbox's start"
                figures.append(
                    Figure(
                        f"admission of {count} plugins (discover, hash, describe)",
                        "ms",
                        tuple(admitted.admissions),
                        150,
                        "",
                        note,
                    )
                )
    return figures


def plugin_round_figures(quick: bool) -> list[Figure]:
    progress("between rounds, with and without the example plugin's three hooks")
    rounds, runs = (15, 1) if quick else (30, 3)
    plain, hooked, kinds = bench_plugin_hooks.alternating(rounds, runs)
    failed = kinds.get("hook_failed", 0)
    overhead = statistics.median(hooked.gaps) - statistics.median(plain.gaps)
    cpu = statistics.median(hooked.cpu_ms) - statistics.median(plain.cpu_ms)
    return [
        Figure("agent exit -> next start, no plugin (git, commit)", "ms", tuple(plain.gaps)),
        Figure(
            "agent exit -> next start, the example plugin's 3 hooks",
            "ms",
            tuple(hooked.gaps),
            note=f"{kinds.get('plugin_admitted', 0)} admissions, {failed} failed calls",
        ),
        Figure("per-round overhead of the 3 hooks (difference of medians)", "ms", (overhead,), 40),
        Figure("CPU time of a round, no plugin", "ms", tuple(plain.cpu_ms)),
        Figure("CPU time of a round, the example plugin's 3 hooks", "ms", tuple(hooked.cpu_ms)),
        Figure("CPU time of the 3 hooks a round (difference of medians)", "ms", (cpu,)),
    ]


def peek_figures(quick: bool) -> list[Figure]:
    runs = 5 if quick else bench_peek.RUNS
    medians = {}
    figures = []
    for lines in (1_000, 1_000_000):
        progress(f"peek --json with {lines:,} event lines")
        sources = (False, True) if lines == 1_000_000 else (False,)
        (samples, cpus), *source = bench_peek.peek_with_lines(lines, runs, sources=sources)
        medians[lines] = statistics.median(samples)
        figures += [
            Figure(f"peek --json, {lines:,} event lines", "ms", tuple(samples), 150, "§11"),
            Figure(f"peek --json, {lines:,} event lines, CPU time", "ms", tuple(cpus)),
        ]
        for walls, source_cpus in source:
            name = f"peek --json, {lines:,} event lines, compiled at each start"
            note = f"no bytecode; CPU {statistics.median(source_cpus):.1f} ms"
            figures.append(Figure(name, "ms", tuple(walls), note=note))
    ratio = medians[1_000_000] / medians[1_000]
    figures.append(Figure("peek --json, 1,000,000 lines / 1,000 lines", "x", (ratio,), 1.2, "§11"))
    return figures


def status_all_figures(quick: bool) -> list[Figure]:
    projects = bench_status_all.PROJECTS
    progress(f"status --all --json with {projects} projects")
    with tempfile.TemporaryDirectory() as tmp:
        env = bench_status_all.make_host(Path(tmp))
        walls, cpus = bench_status_all.command_ms(env, 5 if quick else bench_status_all.RUNS)
    name = f"status --all --json, {projects} projects"
    return [Figure(name, "ms", tuple(walls)), Figure(f"{name}, CPU time", "ms", tuple(cpus))]


def budget_figures(quick: bool) -> list[Figure]:
    progress("the spend caps' work per round, and a stop during a budget wait")
    now = time.time()
    with_ledger, _ = bench_budget.per_round_us(bench_budget.full_ledger(now), now)
    stops = bench_budget.stop_latencies(3 if quick else bench_budget.STOP_RUNS)
    return [
        Figure(
            "spend caps' ledger work per round (a day of rounds)",
            "us",
            tuple(with_ledger),
            note="record, check, encode",
        ),
        Figure("stop latency during a budget wait", "ms", tuple(stops), 300, "§11"),
    ]


def transcript_figures(quick: bool) -> list[Figure]:
    runs = 3 if quick else 7
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for parser in bench_transcript_tail.CASES:
            progress(f"a 50 MB {parser} transcript")
            path = bench_transcript_tail.recorded_failure(parser, folder)
            samples, peak_mb = bench_transcript_tail.measure(parser, path, runs)
            path.unlink()
            note = f"peak {peak_mb:.1f} MB traced"
            figures.append(
                Figure(f"parse a 50 MB {parser} transcript", "ms", tuple(samples), note=note)
            )
        progress("a 2 GB (sparse) claude transcript")
        tail = bench_parsers.CASES["claude"].read_bytes()
        sparse = bench_parsers.make_transcript(
            folder, "claude-2g", tail, bench_parsers.SIZES["2 GB"], bench_parsers.FILLER
        )
        samples = bench_parsers.parse_ms("claude", sparse, runs)
        figures.append(Figure("parse a 2 GB (sparse) claude transcript", "ms", tuple(samples)))
    return figures


def table(figures: list[Figure]) -> str:
    width = max(len(f.name) for f in figures)
    head = f"{'figure':<{width}}  {'median':>9} {'min':>9} {'max':>9} {'n':>4}  {'target':<12} "
    lines = [head + "verdict", "-" * (len(head) + 7)]
    for f in figures:
        target = "" if f.limit is None else f"<= {f.limit:g} {f.unit} {f.source}".rstrip()
        cells = [statistics.median(f.samples), min(f.samples), max(f.samples)]
        numbers = " ".join(f"{value:>9.{3 if f.unit == 's' else 1}f}" for value in cells)
        line = f"{f.name:<{width}}  {numbers} {len(f.samples):>4}  {target:<12} {f.verdict()}"
        lines.append(line.rstrip() + (f"  ({f.note})" if f.note else ""))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cpu-round-s", type=float, default=60.0, help="the waiting round")
    parser.add_argument("--quick", action="store_true", help="fewer samples, a 20 s round")
    measures: dict[str, Callable[[], list[Figure]]] = {
        "cli": lambda: cli_figures(args.quick),
        "restart": lambda: restart_figures(args.quick),
        "trampoline": lambda: trampoline_figures(args.quick),
        "plugin-boot": lambda: plugin_boot_figures(args.quick),
        "plugin-round": lambda: plugin_round_figures(args.quick),
        "memory": lambda: memory_figures(args.quick),
        "peek": lambda: peek_figures(args.quick),
        "status-all": lambda: status_all_figures(args.quick),
        "budget": lambda: budget_figures(args.quick),
        "transcripts": lambda: transcript_figures(args.quick),
        "cpu": lambda: cpu_figures(round_s),
    }
    parser.add_argument(
        "--only", default=",".join(measures), help=f"some of: {', '.join(measures)}"
    )
    args = parser.parse_args()
    chosen = args.only.split(",")
    unknown = [name for name in chosen if name not in measures]
    if unknown:
        parser.error(f"--only: no measurement named {unknown[0]!r}")
    round_s = 20.0 if args.quick and args.cpu_round_s == 60.0 else args.cpu_round_s
    started = time.monotonic()
    figures: list[Figure] = []
    failed = []
    for measure in (measures[name] for name in chosen):
        try:
            figures += measure()
        except Exception as exc:  # one broken measurement must not cost the others
            failed.append(f"{type(exc).__name__}: {exc}")
            progress(f"FAILED: {failed[-1]}")
    uname = platform.uname()
    print(
        f"agent-runner benchmarks, {time.strftime('%Y-%m-%d')}, {uname.system} {uname.release} "
        f"{uname.machine}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"uid {os.geteuid()}, load average {os.getloadavg()[0]:.2f}, "
        f"{time.monotonic() - started:.0f} s"
    )
    print(table(figures))
    for failure in failed:
        print(f"not measured: {failure}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
