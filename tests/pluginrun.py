"""The real CLI and serve, run with test plugin installs on the supervisor's sys.path."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from agent_runner.supervisor.loop.state import read_state
from tests.conftest import cli_argv, run_cli
from tests.contracts import conforming
from tests.integration.conftest import Project

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def cli(
    project: Project, *args: str, before: tuple[Path, ...] = (), after: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        *args, "--config", str(project.config_path), cwd=project.root, before=before, after=after
    )


def serve_once(
    project: Project, before: tuple[Path, ...] = (), after: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    done = cli(project, "serve", "--once", before=before, after=after)
    assert done.returncode == 0, done.stderr
    return done


def start_serve(project: Project, *args: str, site: Path) -> subprocess.Popen[bytes]:
    """serve in the background with `site` first on its sys.path; the fixture stops it."""
    proc = subprocess.Popen(
        cli_argv("serve", *args, "--config", str(project.config_path), before=(site,)),
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    project.children.append(proc)
    return proc


def verdicts(project: Project) -> dict[str, dict[str, Any]]:
    """state.json's verdicts of third-party entries, by name."""
    state = read_state(project.log_dir)
    return {v["name"]: v for v in state["plugins"] if v["kind"] != "builtin"}


def listed(project: Project, site: Path) -> dict[str, dict[str, Any]]:
    done = cli(project, "plugins", "list", "--json", before=(site,))
    assert done.returncode == 0, done.stderr
    rows = conforming("plugins list --json", done.stdout)["plugins"]
    return {row["name"]: row for row in rows if row["site"]}


def pin(project: Project, site: Path, name: str) -> str:
    done = cli(project, "plugins", "pin", name, before=(site,))
    assert done.returncode == 0, done.stderr
    match = DIGEST.search(done.stdout)
    assert match, done.stdout
    return match.group(0)


def peek(project: Project, site: Path) -> dict[str, Any]:
    done = cli(project, "peek", "--json", before=(site,))
    assert done.returncode == 0, done.stderr
    return dict(conforming("peek --json", done.stdout))


def fork_servers(serve_pid: int) -> list[int]:
    """serve's children that are sandbox fork servers (none once serve is gone)."""
    try:
        children = Path(f"/proc/{serve_pid}/task/{serve_pid}/children").read_text().split()
    except OSError:
        return []
    found = []
    for child in children:
        try:
            if b"forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except OSError:
            continue  # gone meanwhile
    return found


def server_children(server_pid: int) -> list[int]:
    """A fork server's children: the child of a running call, or the one waiting for the next."""
    try:
        path = Path(f"/proc/{server_pid}/task/{server_pid}/children")
        return [int(pid) for pid in path.read_text().split()]
    except OSError:
        return []


def hook_calls(server_pid: int) -> list[int]:
    """The fork server's children that are running a call: confined (no_new_privs set), unlike
    the child forked ahead that waits for the next call."""
    running = []
    for pid in server_children(server_pid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # gone meanwhile
        if "\nNoNewPrivs:\t1\n" in status:
            running.append(pid)
    return running
