"""Run one CLI case as its preset does (`agent-runner round`) against the fake API; save it.

Call inside a loopback-only namespace (see netns.py). Each case gets a fresh git work tree
and HOME under RUN_ROOT, at a fixed path so the recordings hold no random names.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import tomli_w

from agent_runner.config import load_preset
from agent_runner.events import iter_events
from recording.cases import Case
from recording.clis import Cli, node_version, search_path
from recording.fakeapi import FakeApi

# Not under /tmp: codex refuses to set up its helper binaries in a temporary directory.
RUN_ROOT = Path("/var/lib/agent-runner-record")
PROMPT = "Reply with the single word: done. Do not run any tools and do not edit any file.\n"
GRACE_S = 5.0
_GIT = ["git", "-c", "user.name=recorder", "-c", "user.email=recorder@localhost"]


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Closed again: a connect now gets ECONNREFUSED.
    return f"http://127.0.0.1:{port}"


def _work_tree(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "README.md").write_text("# scratch\n\nA work tree for one recorded round.\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "README.md"],
        ["commit", "-q", "-m", "init"],
    ):
        subprocess.run([*_GIT, *args], cwd=path, check=True, capture_output=True)


def base_env(home: Path) -> dict[str, str]:
    """The environment every CLI starts from: nothing of the operator's leaks in."""
    return {
        "PATH": search_path(),
        "HOME": str(home),
        "USER": "recorder",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TZ": "UTC",
        "NO_COLOR": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "recorder",
        "GIT_AUTHOR_EMAIL": "recorder@localhost",
        "GIT_COMMITTER_NAME": "recorder",
        "GIT_COMMITTER_EMAIL": "recorder@localhost",
    }


def run_case(
    cli: Cli,
    case: Case,
    out_dir: Path,
    *,
    agent_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Record `case` into `out_dir/<case>.log` and `<case>.json`; return the metadata.

    `agent_overrides` adds keys to the round's `[agent]` table (issue #19 turns confinement on
    this way); the preset itself is used as shipped.
    """
    root = RUN_ROOT / f"{cli.name}-{case.name}"
    shutil.rmtree(root, ignore_errors=True)
    home, work, logs = root / "home", root / "work", root / "logs"
    home.mkdir(parents=True)
    _work_tree(work)
    (root / "prompts").mkdir()
    (root / "prompts" / "main.md").write_text(PROMPT)
    agent: dict[str, Any] = {"preset": cli.name, "sigterm_grace_s": GRACE_S}
    if case.without_flag:
        command = load_preset(cli.name)["command"]
        agent["command"] = [arg for arg in command if arg != case.without_flag]
    agent.update(agent_overrides or {})
    config = {
        "schema_version": 1,
        "agent": agent,
        "prompt": {"files": [str(root / "prompts" / "main.md")]},
        "runtime": {"work_dir": str(work), "log_dir": str(logs), "round_budget_s": case.budget_s},
        "vcs": {"dirty_action": "ignore"},
    }
    config_path = root / "agent-runner.toml"
    config_path.write_text(tomli_w.dumps(config))
    with FakeApi(cli.provider.reply, case.api) as api:
        base_url = _closed_port_url() if case.refused else api.base_url
        env = {**base_env(home), **cli.setup(home, base_url, case)}
        started = time.time()
        subprocess.run(
            [sys.executable, "-m", "agent_runner", "round", "--config", str(config_path)],
            env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
            cwd=root,
            capture_output=True,
            timeout=case.budget_s + GRACE_S + 60,
            check=False,
        )
        requests = list(api.log)
    tree = subprocess.run(
        [*_GIT, "status", "--porcelain", "--untracked-files=all", "--ignored"],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    events = list(iter_events(logs))
    exit_event = next(e for e in events if e["event"] == "agent_exit")
    spawn = next(e for e in events if e["event"] == "agent_spawn")
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(logs / "rounds" / "round-000001.log", out_dir / f"{case.name}.log")
    meta = {
        "cli": cli.name,
        "version": cli.version,
        "case": case.name,
        "about": case.about,
        "argv": spawn["argv"],
        "budget_s": case.budget_s,
        "exit_code": exit_event["exit_code"],
        "signal": exit_event["signal"],
        "exit_cause": exit_event["exit_cause"],
        "killed_at_budget": exit_event["exit_cause"] == "timeout",
        "duration_s": exit_event["duration_s"],
        "recorded_at": round(started),
        "tz": env["TZ"],
        "requests": _summary(requests, started),
        "tree_after": tree,
    }
    if agent_overrides:
        meta["agent_overrides"] = agent_overrides
        meta["confined"] = spawn["confined"]
    (out_dir / f"{case.name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    return meta


def _summary(requests: list[dict[str, Any]], started: float) -> dict[str, Any]:
    """How many API calls the CLI made and over how long: its own retrying, measured."""
    statuses: dict[str, int] = {}
    for request in requests:
        key = f"{request['method']} {request['path'].split('?')[0]} {request['status']}"
        statuses[key] = statuses.get(key, 0) + 1
    times = [r["t"] - started for r in requests]
    return {
        "count": len(requests),
        "first_s": round(min(times), 1) if times else None,
        "last_s": round(max(times), 1) if times else None,
        "by_path_and_status": statuses,
    }


def record_help(cli: Cli, out_dir: Path) -> None:
    """Save `<cli> --version` and the help of the command the preset runs."""
    home = RUN_ROOT / f"{cli.name}-help"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = base_env(home)
    version = _output([str(cli.binary), "--version"], env, home)
    help_text = _output([str(cli.binary), *cli.help_args], env, home)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "help.txt").write_text(help_text)
    info = {
        "cli": cli.name,
        "registry": cli.registry,
        "package": cli.package,
        "version": cli.version,
        "version_output": version.strip(),
        "help_command": [cli.binary.name, *cli.help_args],
    }
    if cli.registry == "npm":
        info["node"] = node_version()
    (out_dir / "cli.json").write_text(json.dumps(info, indent=2) + "\n")


def _output(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    return done.stdout + done.stderr
