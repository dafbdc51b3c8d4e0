"""A throwaway project (git repo, config, prompt, log_dir) and the real CLI to drive it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from agent_runner.events import iter_events

AGENTS = Path(__file__).parents[1] / "agents"
REPO = Path(__file__).parents[2]


@dataclass
class Project:
    root: Path
    work_dir: Path
    log_dir: Path
    config_path: Path
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def write_config(self, command: list[str], **tables: dict[str, Any]) -> None:
        document: dict[str, Any] = {
            "schema_version": 1,
            "agent": {"command": command, "parser": "claude", "sigterm_grace_s": 0.5},
            "runtime": {
                "log_dir": str(self.log_dir),
                "restart_delay_s": 0,
                "round_budget_s": 30,
            },
        }
        for name, values in tables.items():
            document.setdefault(name, {}).update(values)
        self.config_path.write_text(tomli_w.dumps(document))

    def cli(
        self, *args: str, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agent_runner", *args, "--config", str(self.config_path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env={**os.environ, **(env or {})},
        )

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent_runner",
                "serve",
                *args,
                "--config",
                str(self.config_path),
            ],
            cwd=self.root,
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.children.append(proc)
        return proc

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e for e in iter_events(self.log_dir) if kind is None or e["event"] == kind]

    def wait_for(self, kind: str, count: int = 1, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events(kind)
            if len(found) >= count:
                return found[count - 1]
            time.sleep(0.02)
        raise AssertionError(f"no {kind} event #{count} within {timeout}s: {self.events()}")


def agent(name: str, *args: str) -> list[str]:
    return [sys.executable, str(AGENTS / name), *args]


def git(repo: Path, *args: str, check: bool = True) -> str:
    """Test-side git, unhardened, with an identity of its own (the code under test needs none)."""
    out = subprocess.run(
        # safe.directory: a test may hand its repository to another uid and still read it.
        [
            "git",
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=tester",
            "-c",
            "user.email=t@example.com",
            *args,
        ],
        cwd=repo,
        check=check,
        capture_output=True,
    )
    return out.stdout.decode("utf-8", "surrogateescape")


@pytest.fixture
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config and no inherited GIT_* variable reach a test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for name in list(os.environ):
        if name.startswith("GIT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def init_work_tree(work_dir: Path, prompt: str = "do the work\n") -> None:
    """A new git work tree at `work_dir` (one commit, ignoring the config and the prompts)
    with `prompts/main.md`."""
    work_dir.mkdir(parents=True)
    git(work_dir, "init", "-q")
    (work_dir / ".gitignore").write_text("agent-runner.toml\nprompts/\n")
    git(work_dir, "add", ".gitignore")
    git(work_dir, "commit", "-q", "-m", "init")
    (work_dir / "prompts").mkdir()
    (work_dir / "prompts" / "main.md").write_text(prompt)


def create_project(root: Path) -> Project:
    """A git work tree with a prompt under `root`, its log_dir beside it."""
    work_dir = root / "work"
    init_work_tree(work_dir)
    return Project(root, work_dir, root / "logs", work_dir / "agent-runner.toml")


def stop_children(project: Project) -> None:
    """End every serve a test started and left running."""
    for child in project.children:
        if child.poll() is None:
            # SIGTERM first: serve then takes its agent down with it; SIGKILL would orphan it.
            child.terminate()
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    proj = create_project(tmp_path)
    yield proj
    stop_children(proj)
