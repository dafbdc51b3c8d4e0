"""Per-round supervisor overhead of plugin hooks: examples/office-hours's three hooks vs none.

Prints medians; asserts nothing. Usage: python benchmarks/bench_plugin_hooks.py [rounds=30] [runs=3]
Target: the three hooks (spawn, dirty, observe) add under 40 ms a round at the full tier.
Runs with and without the plugin alternate, so a busy host weighs on both alike.

The agent writes one file under docs/ and exits 0, so each round ends with one commit
either way: by the builtin (`dirty_action = "commit"`) without plugins, by the example's
dirty handler with it. The gap measured is agent exit -> next agent start (`date` at each
end), which holds everything serve does between two rounds: reaping, parsing, securing the
tree, the observers, the policy, the gates and the spawn hooks.

Each configuration also runs a one-round serve, so that the CPU time of one round (serve
and everything it ran: git, the agent, the fork server and the hooks' children) comes out
without serve's boot: (CPU of the long serve - CPU of the one-round serve) / (rounds - 1).
On a host shared with other work, the wall-clock gap moves with the load; this does not.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).parents[1]
EXAMPLE = REPO / "examples" / "office-hours"
# The CLI with the plugin's install folder first on sys.path, as the tests run it.
LAUNCH = """\
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
sys.argv[:2] = ["agent-runner"]
from agent_runner.cli import main
main()
"""
GIT_ENV = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b"}
GIT_ENV |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}


def install_example(target: Path) -> None:
    wheels = target.parent / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, hatchling.build as b; print(b.build_wheel(sys.argv[1]))",
            str(wheels),
        ],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        check=True,
    )
    wheel = wheels / built.stdout.strip().splitlines()[-1]
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
            str(target),
            str(wheel),
        ],
        check=True,
    )


def cli(site: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    path = json.dumps([str(site)] if site else [])
    return subprocess.run(
        [sys.executable, "-c", LAUNCH, path, *args], capture_output=True, text=True, check=True
    )


def project(root: Path, stamps: Path, site: Path | None, command: list[str] | None = None) -> Path:
    """A git project whose agent writes docs/round.md (or runs `command`); with `site`, the
    example plugin installed there is pinned and decides the dirty tree."""
    work = root / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts" / "main.md").write_text("go\n")
    (work / ".gitignore").write_text("agent-runner.toml\nprompts/\n")
    for args in (["init", "-q"], ["add", ".gitignore"], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=work, check=True, env={**os.environ, **GIT_ENV})
    script = f"date +%s.%N >> {stamps}.start; echo $AGENT_RUNNER_ROUND > docs/round.md; date +%s.%N >> {stamps}.end"
    (work / "docs").mkdir()
    document: dict[str, Any] = {
        "schema_version": 1,
        "agent": {"command": command or ["sh", "-c", script], "parser": "claude"},
        "runtime": {"log_dir": str(root / "logs"), "restart_delay_s": 0},
        "breakers": {"stalled_rounds": 10_000},
        "vcs": {"dirty_action": "commit"},
        "plugins": {"sandbox": "require"},
    }
    config = work / "agent-runner.toml"
    config.write_text(tomli_w.dumps(document))
    if site is not None:
        pinned = cli(site, "plugins", "pin", "office_hours", "--config", str(config))
        digest = pinned.stdout.split("sha256:", 1)[1][:64]
        document["vcs"] = {"dirty_handler": "office_hours"}
        document["plugins"] |= {
            "pin": {"office_hours": f"sha256:{digest}"},
            "spawn_override_allow": ["office_hours"],
            "settings": {"office_hours": {"start_hour": 0, "end_hour": 0}},  # always open
        }
        config.write_text(tomli_w.dumps(document))
    return config


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def serve_cpu_s(rounds: int, site: Path | None) -> float:
    """CPU time of a whole serve of `rounds` rounds and of everything it ran."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = project(root, root / "stamps", site)
        before = children_cpu_s()
        cli(site, "serve", "--max-rounds", str(rounds), "--config", str(config))
        return children_cpu_s() - before


def round_gaps(rounds: int, site: Path | None) -> tuple[list[float], dict[str, int]]:
    """Each agent exit -> next agent start, in ms; and a count of the events by kind."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stamps = root / "stamps"
        config = project(root, stamps, site)
        cli(site, "serve", "--max-rounds", str(rounds), "--config", str(config))
        starts = [float(x) for x in Path(f"{stamps}.start").read_text().split()]
        ends = [float(x) for x in Path(f"{stamps}.end").read_text().split()]
        kinds: dict[str, int] = {}
        for path in (root / "logs").glob("events-*.jsonl"):
            for line in path.read_text().splitlines():
                kind = json.loads(line)["event"]
                kinds[kind] = kinds.get(kind, 0) + 1
        gaps = [(starts[i + 1] - ends[i]) * 1000 for i in range(len(starts) - 1)]
        return gaps, kinds


@dataclass
class Rounds:
    """Per configuration: the gaps between rounds (ms) and the CPU time of a round (ms)."""

    gaps: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def alternating(rounds: int, runs: int) -> tuple[Rounds, Rounds, dict[str, int]]:
    """Without plugins and with the example's three hooks, runs alternating; the events of
    the runs with the plugin, counted by kind."""
    without, with_hooks = Rounds(), Rounds()
    kinds: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        install_example(site)
        for _ in range(runs):
            for figures, where in ((without, None), (with_hooks, site)):
                before = children_cpu_s()
                gaps, seen = round_gaps(rounds, where)
                long_serve = children_cpu_s() - before
                one_round = serve_cpu_s(1, where)
                figures.gaps += gaps
                figures.cpu_ms.append((long_serve - one_round) * 1000 / (rounds - 1))
                if where is not None:
                    for kind, count in seen.items():
                        kinds[kind] = kinds.get(kind, 0) + count
    return without, with_hooks, kinds


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    plain_rounds, hooked_rounds, kinds = alternating(rounds, runs)
    without, with_hooks = plain_rounds.gaps, hooked_rounds.gaps
    admitted = kinds.get("plugin_admitted", 0) == runs
    failed = kinds.get("hook_failed", 0)
    plain, hooked = statistics.median(without), statistics.median(with_hooks)
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {runs} x {rounds} rounds each"
    )
    print(
        f"between rounds, no plugin:             median {plain:.1f} ms, min {min(without):.1f} ms"
    )
    print(
        f"between rounds, office_hours' 3 hooks: median {hooked:.1f} ms, min {min(with_hooks):.1f} ms"
        f" ({'full tier' if admitted else 'NOT ADMITTED'}, {failed} failed calls)"
    )
    print(
        f"overhead of the three hooks:           {hooked - plain:.1f} ms a round (median; target < 40 ms)"
    )
    print(
        f"                                       {min(with_hooks) - min(without):.1f} ms a round (min)"
    )
    plain_cpu = statistics.median(plain_rounds.cpu_ms)
    hooked_cpu = statistics.median(hooked_rounds.cpu_ms)
    print(
        f"CPU time of a round, no plugin:        {plain_cpu:.1f} ms; with the 3 hooks "
        f"{hooked_cpu:.1f} ms; the hooks' share {hooked_cpu - plain_cpu:.1f} ms"
    )
    commits = kinds.get("dirty_auto_committed", 0)
    print(
        f"  the plugin's commits {commits}, tool_calls events {kinds.get('office_hours.tool_calls', 0)}"
    )
