"""`status --all` over real serves sharing one state home, a unit `install` would leave, and
a project whose state files are damaged or planted: each gets its line, nothing hangs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from agent_runner.config import default_log_dir
from agent_runner.systemd.names import unit_name
from tests.contracts import checks_by_name, conforming
from tests.integration.conftest import Project, agent, init_work_tree


def make_project(root: Path, name: str, command: list[str], **tables: Any) -> Project:
    work = root / name
    init_work_tree(work, prompt="go\n")
    document: dict[str, Any] = {
        "schema_version": 1,
        "agent": {"command": command, "parser": "claude", "sigterm_grace_s": 0.5},
        "runtime": {"restart_delay_s": 0, "round_budget_s": 60},  # log_dir: the default
        **tables,
    }
    (work / "agent-runner.toml").write_text(tomli_w.dumps(document))
    return Project(root, work, default_log_dir(work), work / "agent-runner.toml")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def status_all(cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "agent_runner", "status", "--all", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return conforming("status --all --json", done.stdout)


def by_dir(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["log_dir"]: p for p in report["projects"]}


def test_every_project_on_the_host_with_its_round_back_off_last_exit_and_spend(
    host: Path,
) -> None:
    working = make_project(host / "p", "working", agent("sleeper.py", "60"))
    waiting = make_project(host / "p", "waiting", agent("rate_limited.py", "3600"))
    spent = make_project(
        host / "p",
        "spent",
        agent("reports_usage.py", "0.03", "100", "20"),
        runtime={"restart_delay_s": 0, "max_rounds": 2},
    )
    done = spent.cli("serve")
    assert done.returncode == 0, done.stderr
    running = [working.start(), waiting.start()]
    try:
        working.wait_for("agent_spawn")
        waiting.wait_for("backoff_wait")
        # What `install` leaves for a project: its drop-in in the user's unit folder.
        unit = unit_name(os.path.realpath(spent.work_dir))
        dropin = host / "config" / "systemd" / "user" / f"{unit}.d" / "agent-runner.conf"
        dropin.parent.mkdir(parents=True)
        dropin.write_text("[Service]\n")
        report = status_all(host)
        projects = by_dir(report)
        assert report["state_home"] == str(host / "state" / "agent-runner")

        now_working = projects[str(working.log_dir)]
        assert (now_working["supervisor"]["state"], now_working["round"]) == ("running", 1)
        assert now_working["work_dir"] == str(working.work_dir)
        assert now_working["supervisor"]["pid"] == running[0].pid

        now_waiting = projects[str(waiting.log_dir)]
        assert now_waiting["supervisor"]["state"] == "backoff"
        assert now_waiting["backoff"]["classification"] == "rate_limit_account"
        last = now_waiting["last_round"]
        assert (last["round"], last["exit_cause"], last["exit_code"]) == (1, "error", 1)

        now_spent = projects[str(spent.log_dir)]
        assert (now_spent["supervisor"]["state"], now_spent["backoff"]) == ("stopped", None)
        assert now_spent["today"] == {"rounds": 2, "tokens": 240, "cost_usd": 0.06}
        last = now_spent["last_round"]
        assert (last["round"], last["exit_cause"], last["exit_code"]) == (2, "clean", 0)
        assert now_spent["units"] == [
            {"unit": unit, "scope": "user", "project_dir": os.path.realpath(spent.work_dir)}
        ]
        text = subprocess.run(
            [sys.executable, "-m", "agent_runner", "status", "--all"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=host,
        ).stdout
        assert f"working-{working.log_dir.name.rsplit('-', 1)[1]}  {working.work_dir}" in text
        assert "back-off until" in text
        assert "today 2 rounds, $0.06 reported" in text
    finally:
        for serve in running:
            serve.terminate()
            serve.wait(timeout=15)


def test_damaged_and_planted_state_files_cost_their_own_line_only(host: Path) -> None:
    home = host / "state" / "agent-runner"
    fifo = home / "fifo-00000000"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "state.json")
    garbage = home / "garbage-00000000"
    garbage.mkdir()
    (garbage / "state.json").write_bytes(b"\xff{not json")
    (garbage / "serve.pid").write_text('{"pid": 1, "start_ticks": 1}')  # pid 1 is not serve
    link = home / "link-00000000"
    link.mkdir()
    (link / "state.json").symlink_to("/etc/passwd")
    (home / "symlinked-00000000").symlink_to(garbage)
    (home / "empty-00000000").mkdir()
    projects = by_dir(status_all(host))
    assert set(projects) == {str(fifo), str(garbage), str(link)}
    assert "a FIFO, not a regular file" in projects[str(fifo)]["problem"]
    assert projects[str(garbage)]["problem"].startswith("state.json: not valid JSON")
    assert projects[str(garbage)]["supervisor"]["state"] == "stopped"
    assert projects[str(link)]["problem"].startswith("state.json: cannot read it")


def test_a_unit_whose_project_config_is_broken_is_still_listed(host: Path) -> None:
    project = make_project(host / "p", "broken", ["true"])
    project.config_path.write_text("schema_version = 2\n")
    unit = unit_name(os.path.realpath(project.work_dir))
    dropin = host / "config" / "systemd" / "user" / f"{unit}.d" / "agent-runner.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\n")
    [entry] = [p for p in status_all(host)["projects"] if p["units"]]
    assert entry["log_dir"] == str(default_log_dir(Path(os.path.realpath(project.work_dir))))
    assert "schema_version: must be 1" in entry["problem"]
    assert entry["supervisor"]["state"] == "stopped"


def test_doctor_fails_when_another_serve_runs_in_the_same_work_dir(host: Path) -> None:
    first = make_project(host / "p", "shared", agent("sleeper.py", "60"))
    serve = first.start()
    try:
        first.wait_for("agent_spawn")
        # The same tree under another config with its own log_dir: its own lock, so a second
        # serve would start; doctor is what says so.
        other = host / "other.toml"
        document = first.config_path.read_text()
        other.write_text(
            document.replace(
                "[runtime]",
                f'[runtime]\nwork_dir = "{first.work_dir}"\nlog_dir = "{host / "other-logs"}"',
            )
        )
        (host / "prompts").mkdir()
        (host / "prompts" / "main.md").write_text("go\n")
        done = subprocess.run(
            [sys.executable, "-m", "agent_runner", "doctor", "--json", "--config", str(other)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=host,
        )
        checks = checks_by_name(done.stdout)
        assert checks["projects on this host"]["status"] == "fail"
        assert f"pid {serve.pid}" in checks["projects on this host"]["detail"]
        assert done.returncode == 1
    finally:
        serve.terminate()
        serve.wait(timeout=15)
