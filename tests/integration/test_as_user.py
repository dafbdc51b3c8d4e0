"""What an operator running `systemctl --user` gets, run for real as an unused uid next to
the same run as root: serve's notifications run as the serving user, rescue works on that
user's repository, and `status --all` lists what it may read and says what it may not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from tests import unprivileged
from tests.contracts import conforming
from tests.integration.conftest import AGENTS, REPO, init_work_tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to compare both modes")


@dataclass
class Operator:
    mode: str  # "root" or "user"
    uid: int
    root: Path

    def run(self, *args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        if self.mode == "user":
            argv = unprivileged.command("agent_runner", *args, uid=self.uid)
        else:
            argv = [sys.executable, "-m", "agent_runner", *args]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
        )

    def own(self, path: Path) -> None:
        if self.mode == "user":
            for item in (path, *path.rglob("*")):
                os.lchown(item, self.uid, self.uid)


@pytest.fixture(params=["root", "user"])
def operator(request: pytest.FixtureRequest) -> Iterator[Operator]:
    # Outside pytest's 0700 base folder: the unused uid must be able to reach it.
    root = Path(tempfile.mkdtemp(prefix="ar-as-user-"))
    root.chmod(0o755)
    uid = unprivileged.unused_uid() if request.param == "user" else 0
    try:
        yield Operator(request.param, uid, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def make_project(op: Operator, command: list[str], **tables: Any) -> tuple[Path, Path]:
    work = op.root / "work"
    init_work_tree(work, prompt="go\n")
    config = work / "agent-runner.toml"
    document = {
        "schema_version": 1,
        "agent": {"command": command, "parser": "claude", "sigterm_grace_s": 0.5},
        "runtime": {"log_dir": str(op.root / "logs"), "restart_delay_s": 0},
        **tables,
    }
    config.write_text(tomli_w.dumps(document))
    op.own(op.root)
    return work, config


def test_notifications_run_as_the_serving_user(operator: Operator) -> None:
    record = operator.root / "record.jsonl"
    recorder = [sys.executable, str(AGENTS / "records_notification.py"), str(record), "ok"]
    work, config = make_project(
        operator,
        [sys.executable, "-c", "import sys; sys.exit(1)"],
        breakers={"crash_loop_rounds": 1},
        notify={"command": [*recorder], "on": ["crash_loop"]},
    )
    done = operator.run("serve", "--config", str(config), cwd=work, env={})
    assert done.returncode == 69, done.stderr
    [got] = [json.loads(line) for line in record.read_text().splitlines()]
    assert json.loads(got["stdin"])["event"] == "crash_loop"
    assert os.stat(record).st_uid == operator.uid  # it ran as the user serve runs as


def test_rescue_restores_the_users_own_work(operator: Operator) -> None:
    work, config = make_project(
        operator,
        ["sh", "-c", "echo draft > draft.txt; exit 1"],
        runtime={"log_dir": str(operator.root / "logs"), "max_rounds": 1},
    )
    done = operator.run("serve", "--config", str(config), cwd=work, env={})
    assert done.returncode == 0, done.stderr
    listed = operator.run("rescue", "--json", "--config", str(config), cwd=work, env={})
    assert listed.returncode == 0, listed.stderr
    [entry] = conforming("rescue --json", listed.stdout)["secured"]
    assert entry["kept_by"] == ["refs/agent-runner/rounds/1", "stash@{0}"]
    applied = operator.run(
        "rescue", "apply", entry["sha"], "--config", str(config), cwd=work, env={}
    )
    assert applied.returncode == 0, applied.stderr
    assert (work / "draft.txt").read_text() == "draft\n"
    assert os.stat(work / "draft.txt").st_uid == operator.uid


def test_status_all_reads_what_the_user_may_and_names_what_it_may_not(
    operator: Operator,
) -> None:
    home = operator.root / "state" / "agent-runner"
    mine, theirs = home / "mine-00000000", home / "theirs-00000000"
    for folder in (mine, theirs):
        folder.mkdir(parents=True)
        (folder / "state.json").write_text(json.dumps({"last_round_number": 3, "rounds_run": 3}))
    operator.own(operator.root)
    for item in (theirs, theirs / "state.json"):
        os.chown(item, 0, 0)  # another account's project on the same host
    theirs.chmod(0o700)
    done = operator.run(
        "status", "--all", "--json", cwd=operator.root, env={"XDG_STATE_HOME": str(home.parent)}
    )
    assert done.returncode == 0, done.stderr
    projects = {p["name"]: p for p in conforming("status --all --json", done.stdout)["projects"]}
    assert projects["mine-00000000"]["problem"] is None
    if operator.mode == "user":
        assert "Permission denied" in projects["theirs-00000000"]["problem"]
    else:
        assert projects["theirs-00000000"]["problem"] is None
