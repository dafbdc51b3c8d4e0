"""Serve's plugin boot with 0, 1 and 10 installed plugins: discovery + hashing + describe.

Prints medians; asserts nothing. Usage: python benchmarks/bench_plugin_boot.py [runs=15]
Target: admission of 10 plugins under 150 ms beyond the sandbox's own start (probe).
Builds real wheels (hatchling, from a template like tests/plugins/good_plugin) and installs
them with pip into a temporary --target folder; the virtualenv is not touched.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from agent_runner.config import parse_config
from agent_runner.plugins.admission.discovery import discover, search_path
from agent_runner.plugins.admission.trust import running_package
from agent_runner.plugins.admission.verdict import admit
from agent_runner.plugins.parent.sandbox import Sandbox

COUNTS = (0, 1, 10)
PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "bench-plugin-{n}"
version = "1.0.0"

[project.entry-points."agent_runner.plugins"]
bench_plugin_{n} = "bench_plugin_{n}:PLUGIN"

[tool.hatch.build.targets.wheel]
packages = ["bench_plugin_{n}"]
"""
MODULE = """\
import json, re
from agent_runner.plugins import PluginManifest, RoundReport, SpawnDecision
from bench_plugin_{n} import helpers

def gate(view):
    return SpawnDecision.proceed()

def observe(view):
    return RoundReport(events=[("seen", {{"n": helpers.N}})])

PLUGIN = PluginManifest(name="bench_plugin_{n}", spawn_hooks=(gate,), round_observers=(observe,),
                        event_kinds=("seen",))
"""


def install(count: int, root: Path) -> Path:
    site = root / f"site-{count}"
    site.mkdir()
    wheels = []
    for n in range(count):
        source = root / f"src-{count}" / f"bench_plugin_{n}"
        package = source / f"bench_plugin_{n}"
        package.mkdir(parents=True)
        (source / "pyproject.toml").write_text(PYPROJECT.format(n=n))
        (package / "__init__.py").write_text(MODULE.format(n=n))
        (package / "helpers.py").write_text(f"N = {n}\n" + "# padding\n" * 200)
        built = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, hatchling.build as b; print(b.build_wheel(sys.argv[1]))",
                str(root / f"wheels-{count}"),
            ],
            cwd=source,
            capture_output=True,
            text=True,
            check=True,
        )
        wheels.append(str(root / f"wheels-{count}" / built.stdout.strip().splitlines()[-1]))
    if wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-index",
                "--target",
                str(site),
                *wheels,
            ],
            check=True,
        )
    return site


@dataclass
class Admissions:
    """Per run, in ms: the sandbox's start, then discovery + hashing + describe, and the
    supervisor's own CPU time in the latter; how many plugins were admitted."""

    starts: list[float]
    admissions: list[float]
    cpu: list[float]
    admitted: int


def in_process(site: Path, runs: int) -> Admissions:
    """Admit the plugins installed in `site` `runs` times, each with a fresh sandbox."""
    settings = parse_config(
        {"schema_version": 1, "agent": {"command": ["true"], "parser": "none"}}, Path("/x.toml")
    ).plugins
    starts, admissions, cpu, admitted = [], [], [], 0
    folders = search_path([*sys.path, str(site)], cwd=Path.cwd(), work_dir=None)
    for _ in range(runs):
        sandbox = Sandbox("prefer", emit=lambda kind, **fields: None)
        began = time.perf_counter()
        sandbox.start()
        started = time.perf_counter()
        cpu_before = time.process_time()
        admission = admit(
            discover(folders),
            settings,
            sandbox,
            lambda kind, **fields: None,
            package=running_package(),
        )
        done = time.perf_counter()
        cpu.append((time.process_time() - cpu_before) * 1000)
        sandbox.close()
        starts.append((started - began) * 1000)
        admissions.append((done - started) * 1000)
        admitted = len(admission.admitted)
    return Admissions(starts, admissions, cpu, admitted)


def serve_boot(site: Path, root: Path, runs: int) -> list[float]:
    """ms from launching `serve --once` to its serve_start event (all of boot), per run."""
    work = root / "work"
    (work / "prompts").mkdir(parents=True, exist_ok=True)
    (work / "prompts" / "main.md").write_text("go\n")
    config = work / "agent-runner.toml"
    logs = root / "logs"
    config.write_text(
        tomli_w.dumps(
            {
                "schema_version": 1,
                "agent": {"command": ["true"], "parser": "none"},
                "runtime": {"log_dir": str(logs)},
            }
        )
    )
    launch = "import sys; sys.path.append(sys.argv.pop(1)); sys.argv[0] = 'agent-runner'; from agent_runner.cli import main; main()"
    samples = []
    for _ in range(runs):
        shutil.rmtree(logs, ignore_errors=True)
        began = time.time()
        subprocess.run(
            [sys.executable, "-c", launch, str(site), "serve", "--once", "--config", str(config)],
            cwd=root,
            check=True,
            capture_output=True,
        )
        for path in logs.glob("events-*.jsonl"):
            for line in path.read_text().splitlines():
                event = json.loads(line)
                if event["event"] == "serve_start":
                    stamp = time.mktime(time.strptime(event["ts"][:19], "%Y-%m-%dT%H:%M:%S"))
                    stamp += int(event["ts"][20:23]) / 1000 - time.timezone
                    samples.append((stamp - began) * 1000)
    return samples


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(f"plugin boot, median of {runs} runs (ms); load average {os.getloadavg()[0]:.1f}")
        print(
            f"{'plugins':>8} {'sandbox start':>14} {'admission':>10} {'(fastest)':>10}"
            f" {'(our CPU)':>10} {'serve launch->serve_start':>27}"
        )
        for count in COUNTS:
            site = install(count, root)
            measured = in_process(site, runs)
            if measured.admitted != count:
                raise SystemExit(f"{measured.admitted} of {count} admitted")
            boot = statistics.median(serve_boot(site, root / f"project-{count}", max(5, runs // 3)))
            median = statistics.median
            print(
                f"{count:>8} {median(measured.starts):>14.1f} {median(measured.admissions):>10.1f}"
                f" {min(measured.admissions):>10.1f} {median(measured.cpu):>10.1f} {boot:>27.1f}"
            )
    print(
        textwrap.dedent("""\
        admission = discovery + hashing + one confined describe call per plugin, after the
        sandbox has started; target for 10 plugins: < 150 ms. "our CPU" is the supervisor's
        own CPU time in it (the rest is the children's and waiting). The trampoline's per-call
        cost (bench_trampoline.py) bounds it from below: 10 plugins cost 10 calls.""")
    )


if __name__ == "__main__":
    main()
