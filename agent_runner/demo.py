"""`agent-runner demo`: three rounds of the bundled agent in a throwaway repo, then a peek."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from agent_runner import vcs
from agent_runner.config import load_config
from agent_runner.events import format_event
from agent_runner.observe.peek import snapshot
from agent_runner.observe.render import render_peek
from agent_runner.scaffold import write_project
from agent_runner.supervisor.loop.serve import run_serve

DEMO_ROUNDS = 3


def run_demo(echo: Callable[[str], None]) -> int:
    """Run the demo end to end; returns serve's exit code."""
    with tempfile.TemporaryDirectory(prefix="agent-runner-demo-") as tmp:
        work_dir = Path(tmp) / "project"
        work_dir.mkdir()
        vcs.run_git(work_dir, "init", "-q")
        (work_dir / "README.md").write_text("# demo project\n", encoding="utf-8")
        (work_dir / ".gitignore").write_text("agent-runner.toml\nprompts/\n", encoding="utf-8")
        vcs.run_git(work_dir, "add", "README.md", ".gitignore")
        vcs.run_git(work_dir, "commit", "-q", "-m", "initial commit")
        config_path = work_dir / "agent-runner.toml"
        write_project(
            config_path,
            preset="demo",
            force=True,
            log_dir=str(Path(tmp) / "logs"),
            restart_delay_s=1,
            round_budget_s=60,
            max_restart_delay_s=10,
        )
        echo(f"demo project: {work_dir}")
        echo("demo agent:   python -m agent_runner.demo_agent (rate-limited in round 2)\n")
        config = load_config(config_path)
        code = run_serve(
            config,
            max_rounds=DEMO_ROUNDS,
            echo=lambda line: echo(format_event(json.loads(line))),
        )
        echo("\n--- agent-runner peek ---")
        echo(render_peek(snapshot(config, events=0)))
        echo("\n--- git log (the agent's commits) ---")
        echo(vcs.run_git(work_dir, "log", "--oneline").decode().rstrip())
        echo("\n--- git stash list (work the supervisor secured) ---")
        echo(vcs.run_git(work_dir, "stash", "list", "--format=%h %gs").decode().rstrip())
        return int(code)
