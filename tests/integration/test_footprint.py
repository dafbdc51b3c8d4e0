"""What a process imports, through the real CLI: modules only a rare path needs are never
imported by serve's rounds, and `peek --json`, `status --json` and `--help` import none of
the heavy modules only serve, the human renderer or another command needs.

Every module stays in serve's memory for the life of the process (benchmarks/bench_memory.py
measures how much); every module an observation command imports is paid for again on each
call, most of SPEC §11's 150 ms (benchmarks/bench_peek.py, bench_cli.py measure it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Project, agent

# serve as the CLI runs it, writing the names of its modules down as it exits.
LAUNCH = """\
import atexit, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
sys.argv[0] = "agent-runner"
from agent_runner.cli import main
main()
"""
# Needed only by a zone named in a transcript, a misspelt config key, a preset.
RARE = ("zoneinfo", "difflib", "importlib.resources")


# Never imported by peek --json, status --json or --help: serve's event pipeline and its
# sandbox bindings, the config writer, plugin machinery, transcript parsers, git, the human
# renderer, and what only serve's subreaper and temporary files use.
HEAVY = (
    "structlog",
    "tomli_w",
    "py_landlock",
    "pyseccomp",
    "importlib.metadata",
    "agent_runner.plugins",
    "agent_runner.parsers",
    "agent_runner.vcs",
    "agent_runner.observe.render",
    "agent_runner.observe.doctor",
    "agent_runner.supervisor.loop.serve",
    "ctypes",
    "secrets",
)
# serve's process module and what it needs to start agents: peek imports it only for a
# running round's transcript (status also runs systemctl, with subprocess).
SPAWNING = ("agent_runner.supervisor.agent.process", "socket", "subprocess")


def cli_modules(
    project: Project, *args: str, codes: tuple[int, ...] = (0,)
) -> tuple[set[str], str]:
    """The modules `agent-runner ARGS` had imported when it exited, and what it printed."""
    listing = project.root / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(listing), *args],
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode in codes, done.stderr
    return set(listing.read_text().split()), done.stdout


def serve_modules(project: Project, *args: str) -> set[str]:
    return cli_modules(project, "serve", *args)[0]


def imported(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of `names` (a package counts with its submodules) `modules` holds."""
    return sorted(m for m in modules for name in names if m == name or m.startswith(name + "."))


def test_rounds_import_no_module_that_only_a_rare_path_needs(project: Project) -> None:
    project.write_config(["true"])
    modules = serve_modules(project, "--max-rounds", "3", "--config", str(project.config_path))
    assert len(project.events("round_end")) == 3
    assert "agent_runner.supervisor.loop.serve" in modules
    assert sorted(modules & set(RARE)) == []


def test_a_reset_time_in_a_named_zone_is_still_understood(project: Project) -> None:
    """The lazily imported zoneinfo works on the path that needs it."""
    tests = Path(__file__).parents[1]
    transcript = tests / "fixtures" / "transcripts" / "claude" / "plain_text_limit.log"
    agent = [sys.executable, str(tests / "agents" / "prints_transcript.py"), str(transcript), "1"]
    project.write_config(agent)
    modules = serve_modules(project, "--once", "--config", str(project.config_path))
    (found,) = project.events("transient_error_detected")
    assert found["reset_at"] is not None
    assert "zoneinfo" in modules


def test_peek_and_status_json_and_help_import_no_heavy_module(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    config = ("--config", str(project.config_path))
    peek, _ = cli_modules(project, "peek", "--json", *config)
    status, _ = cli_modules(project, "status", "--json", *config, codes=(3,))
    helped, _ = cli_modules(project, "--help")
    assert {"agent_runner.observe.peek", "agent_runner.supervisor.loop.state"} <= peek & status
    assert imported(peek, (*HEAVY, *SPAWNING)) == []
    assert imported(status, (*HEAVY, "agent_runner.supervisor.agent.process", "socket")) == []
    assert "agent_runner.cli" in helped
    commands = (
        "agent_runner.commands",
        "agent_runner.config",
        "agent_runner.observe",
        "agent_runner.supervisor",
        "json",
    )
    assert imported(helped, (*HEAVY, *SPAWNING, *commands)) == []


def test_peek_json_of_a_running_round_imports_no_heavy_module(project: Project) -> None:
    project.write_config(agent("sleeper.py", "3600"))
    serve = project.start()
    spawned = project.wait_for("agent_spawn")
    modules, printed = cli_modules(project, "peek", "--json", "--config", str(project.config_path))
    assert json.loads(printed)["round"]["agent_pid"] == spawned["pid"]
    assert "agent_runner.supervisor.agent.process" in modules  # for the transcript's path
    assert imported(modules, HEAVY) == []
    serve.terminate()
    assert serve.wait(timeout=15) == 0
