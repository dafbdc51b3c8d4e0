"""What serve carries through its rounds: modules only a rare path needs are never imported.

Every module stays in serve's memory for the life of the process (benchmarks/bench_memory.py
measures how much); these are the ones a round does not need.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Project

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


def serve_modules(project: Project, *args: str) -> set[str]:
    listing = project.root / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH, str(listing), "serve", *args],
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return set(listing.read_text().split())


def test_rounds_import_no_module_that_only_a_rare_path_needs(project: Project) -> None:
    project.write_config(["true"])
    modules = serve_modules(project, "--max-rounds", "3", "--config", str(project.config_path))
    assert len(project.events("round_end")) == 3
    assert "agent_runner.supervisor.serve" in modules
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
