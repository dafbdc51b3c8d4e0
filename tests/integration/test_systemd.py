"""install / uninstall through the real CLI, and the rendered units through systemd-analyze.

No systemd runs on these machines: `systemctl` is the recording stand-in in tests/bin (the
one fake binary of the suite); every file is real and lands under a temporary config home.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w

from agent_runner.config import load_config
from agent_runner.errors import SystemdError
from agent_runner.systemd.install import (
    Account,
    Layout,
    apply_plan,
    desired_files,
    exec_start,
    plan_install,
    plan_uninstall,
)
from agent_runner.systemd.names import TEMPLATE, unit_name
from agent_runner.systemd.systemctl import check_manager
from agent_runner.systemd.unit import DROPIN, Scope
from tests.contracts import checks_by_name, conforming
from tests.integration.conftest import REPO, Project, agent, git

FAKE_BIN = Path(__file__).parents[1] / "bin"


@dataclass
class Host:
    """A user's systemd as the CLI sees it: unit folder, runtime dir with its bus, the fake."""

    config_home: Path
    runtime_dir: Path
    log: Path
    env: dict[str, str]

    @property
    def unit_dir(self) -> Path:
        return self.config_home / "systemd" / "user"

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    @property
    def cli_env(self) -> dict[str, str]:
        """The environment the CLI under test runs with."""
        return {**os.environ, **self.env}

    def files(self) -> list[str]:
        if not self.unit_dir.exists():
            return []
        return sorted(str(p.relative_to(self.unit_dir)) for p in self.unit_dir.rglob("*"))


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    # A unix socket path must fit in 108 bytes: the runtime dir is short, not under tmp_path.
    runtime_dir = Path(tempfile.mkdtemp(prefix="ar-run-"))
    bus = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bus.bind(str(runtime_dir / "bus"))
    env = {
        "PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_RUNTIME_DIR": str(runtime_dir),
        "FAKE_SYSTEMCTL_LOG": str(tmp_path / "systemctl.jsonl"),
    }
    yield Host(tmp_path / "config", runtime_dir, tmp_path / "systemctl.jsonl", env)
    bus.close()
    shutil.rmtree(runtime_dir)


def healthy(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), agent={"sigterm_grace_s": 2})


def instance(project: Project) -> str:
    return unit_name(os.path.realpath(project.work_dir))


def second_project(tmp_path: Path) -> Project:
    work_dir = tmp_path / "other-proj"
    work_dir.mkdir()
    git(work_dir, "init", "-q")
    (work_dir / ".gitignore").write_text("agent-runner.toml\nprompts/\n")
    (work_dir / "prompts").mkdir()
    (work_dir / "prompts" / "main.md").write_text("other work\n")
    other = Project(tmp_path, work_dir, tmp_path / "other-logs", work_dir / "agent-runner.toml")
    healthy(other)
    return other


def test_install_writes_the_template_and_the_projects_drop_in_then_enables_it(
    project: Project, host: Host
) -> None:
    healthy(project)
    done = project.cli("install", env=host.env)
    assert done.returncode == 0, done.stderr
    unit = instance(project)
    assert host.calls() == [["--user", "daemon-reload"], ["--user", "enable", unit]]
    wanted = desired_files(
        load_config(project.config_path), "user", layout(host), None, host.cli_env
    )
    for path, text in wanted.items():
        assert path.read_text() == text
        assert path.stat().st_mode & 0o777 == 0o644
    assert (host.unit_dir / "default.target.wants" / unit).is_symlink()
    env_dir = host.config_home / "agent-runner" / "env"
    assert env_dir.stat().st_mode & 0o777 == 0o700
    assert f"API keys: KEY=value lines in {env_dir}/work-" in done.stdout
    assert f"start it: systemctl --user start '{unit}'" in done.stdout
    assert f"journalctl --user -u '{unit}' -f" in done.stdout


def test_install_pins_xdg_state_home_which_the_default_log_dir_depends_on(
    project: Project, host: Host, tmp_path: Path
) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"log_dir": ""})
    env = {**host.env, "XDG_STATE_HOME": str(tmp_path / "state")}
    assert project.cli("install", env=env).returncode == 0
    dropin = (host.unit_dir / f"{instance(project)}.d" / DROPIN).read_text()
    assert f'Environment="XDG_STATE_HOME={tmp_path / "state"}"\n' in dropin
    config = str(project.config_path)
    assert cli("install", "--config", config, env=host.env, drop=["XDG_STATE_HOME"]).returncode == 0
    assert "XDG_STATE_HOME" not in (host.unit_dir / f"{instance(project)}.d" / DROPIN).read_text()


def test_install_now_enables_and_starts_it_and_status_reports_the_instance(
    project: Project, host: Host
) -> None:
    healthy(project)
    assert project.cli("install", "--now", env=host.env).returncode == 0
    unit = instance(project)
    assert ["--user", "enable", "--now", unit] in host.calls()
    status = project.cli("status", "--json", env=host.env)
    assert conforming("status --json", status.stdout)["systemd"] == {
        "unit": unit,
        "scope": "user",
        "active": "active",
        "enabled": "enabled",
    }
    assert f"systemd: {unit} (user): active, enabled" in project.cli("status", env=host.env).stdout


def test_installing_again_over_a_running_instance_says_how_to_apply_it(
    project: Project, host: Host
) -> None:
    healthy(project)
    assert project.cli("install", "--now", env=host.env).returncode == 0
    again = project.cli("install", "--now", env=host.env)
    assert again.returncode == 0, again.stderr
    assert f"systemctl --user restart {instance(project)}` applies this" in again.stdout


def test_dry_run_prints_the_files_and_the_exact_commands_and_changes_nothing(
    project: Project, host: Host
) -> None:
    healthy(project)
    done = project.cli("install", "--dry-run", "--now", env=host.env)
    assert done.returncode == 0, done.stderr
    wanted = desired_files(
        load_config(project.config_path), "user", layout(host), None, host.cli_env
    )
    for path, text in wanted.items():
        assert f"# {path}\n{text}" in done.stdout
    unit = instance(project)
    assert done.stdout.splitlines()[-2:] == [
        "systemctl --user daemon-reload",
        f"systemctl --user enable --now '{unit}'",
    ]
    assert host.calls() == []
    assert host.files() == []


def test_install_refuses_while_a_doctor_check_fails_unless_forced(
    project: Project, host: Host
) -> None:
    project.write_config(["no-such-agent-anywhere", "-p"])
    done = project.cli("install", env=host.env)
    assert done.returncode == 1
    assert (
        "FAIL  agent command: agent.command: 'no-such-agent-anywhere' is not an executable on PATH"
        in done.stderr
    )
    assert done.stderr.splitlines()[-1] == (
        "agent-runner: install refused: 1 doctor check(s) failed; fix them or pass --force"
    )
    assert host.calls() == []
    assert host.files() == []
    forced = project.cli("install", "--force", env=host.env)
    assert forced.returncode == 0, forced.stderr
    assert (host.unit_dir / TEMPLATE).is_file()


@pytest.mark.parametrize("folder", ["pro%ject", 'pro"ject', "pro\nject", "pro$HOME", "pro\\x2d"])
def test_a_project_folder_that_could_inject_unit_syntax_is_refused_in_one_line(
    tmp_path: Path, host: Host, folder: str
) -> None:
    work_dir = tmp_path / folder
    work_dir.mkdir()
    (work_dir / "prompt.md").write_text("work\n")
    config = work_dir / "agent-runner.toml"
    config.write_text(
        tomli_w.dumps(
            {
                "schema_version": 1,
                "agent": {"command": agent("exits_with.py", "0"), "parser": "none"},
                "prompt": {"files": ["prompt.md"]},
                "runtime": {"log_dir": str(tmp_path / "logs")},
            }
        )
    )
    for args in (["install"], ["install", "--dry-run"], ["install", "--force"]):
        done = cli(*args, "--config", str(config), env=host.env)
        assert done.returncode == 1, done.stdout
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("agent-runner: project folder ")
        assert "could change the unit's meaning" in done.stderr
    assert host.calls() == []
    assert host.files() == []


def test_a_config_not_named_agent_runner_toml_is_refused(project: Project, host: Host) -> None:
    healthy(project)
    renamed = project.config_path.with_name("other.toml")
    project.config_path.rename(renamed)
    done = cli("install", "--config", str(renamed), env=host.env)
    assert done.returncode == 1
    assert "rename the config to agent-runner.toml" in done.stderr
    assert host.files() == []


def test_without_a_user_manager_install_explains_linger_and_xdg_runtime_dir(
    project: Project, host: Host
) -> None:
    healthy(project)
    config = str(project.config_path)
    done = cli("install", "--config", config, env=host.env, drop=["XDG_RUNTIME_DIR"])
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "XDG_RUNTIME_DIR is not set" in done.stderr
    assert "loginctl enable-linger" in done.stderr
    assert host.files() == []
    shutil.rmtree(host.runtime_dir)
    host.runtime_dir.mkdir()
    done = project.cli("install", env=host.env)
    assert done.returncode == 1
    assert f"no systemd user manager listens on {host.runtime_dir}/bus" in done.stderr
    assert host.calls() == []


def test_a_user_manager_that_does_not_answer_is_explained_too(project: Project, host: Host) -> None:
    healthy(project)
    done = project.cli("install", env={**host.env, "FAKE_SYSTEMCTL_NO_BUS": "1"})
    assert done.returncode == 1
    assert "systemctl --user daemon-reload: Failed to connect to bus" in done.stderr
    assert "loginctl enable-linger" in done.stderr


def test_uninstall_removes_the_instance_and_the_template_only_after_the_last_one(
    project: Project, host: Host, tmp_path: Path
) -> None:
    healthy(project)
    other = second_project(tmp_path)
    for proj in (project, other):
        assert proj.cli("install", "--now", env=host.env).returncode == 0
    first, second = instance(project), instance(other)
    assert host.files() == sorted(
        [
            TEMPLATE,
            f"{first}.d",
            f"{first}.d/{DROPIN}",
            f"{second}.d",
            f"{second}.d/{DROPIN}",
            "default.target.wants",
            f"default.target.wants/{first}",
            f"default.target.wants/{second}",
        ]
    )
    calls_before = len(host.calls())
    done = project.cli("uninstall", env=host.env)
    assert done.returncode == 0, done.stderr
    assert host.calls()[calls_before:] == [
        ["--user", "disable", "--now", first],
        ["--user", "daemon-reload"],
    ]
    kept = f"{TEMPLATE} stays: other projects use it ({os.path.realpath(other.work_dir)})"
    assert done.stdout.splitlines()[-1] == kept
    assert host.files() == sorted(
        [
            TEMPLATE,
            f"{second}.d",
            f"{second}.d/{DROPIN}",
            "default.target.wants",
            f"default.target.wants/{second}",
        ]
    )
    status = project.cli("status", "--json", env=host.env)
    assert status.returncode == 3
    assert conforming("status --json", status.stdout)["systemd"] is None
    assert other.cli("uninstall", env=host.env).returncode == 0
    assert host.files() == ["default.target.wants"]


def test_uninstall_keeps_the_operators_own_drop_ins(project: Project, host: Host) -> None:
    healthy(project)
    assert project.cli("install", env=host.env).returncode == 0
    own = host.unit_dir / f"{instance(project)}.d" / "override.conf"
    own.write_text("[Service]\nNice=5\n")
    assert project.cli("uninstall", env=host.env).returncode == 0
    assert own.read_text() == "[Service]\nNice=5\n"
    assert not (host.unit_dir / TEMPLATE).exists()


def test_uninstall_of_a_project_that_is_not_installed_says_so(project: Project, host: Host) -> None:
    healthy(project)
    done = project.cli("uninstall", env=host.env)
    assert done.returncode == 1
    assert f"{instance(project)} is not installed for the user manager" in done.stderr
    assert host.calls() == []


def test_uninstall_works_when_the_config_is_broken(project: Project, host: Host) -> None:
    healthy(project)
    assert project.cli("install", env=host.env).returncode == 0
    project.config_path.write_text("schema_version = [\n")
    done = project.cli("uninstall", "--dry-run", env=host.env)
    assert done.returncode == 0, done.stderr
    assert f"systemctl --user disable --now '{instance(project)}'" in done.stdout
    assert project.cli("uninstall", env=host.env).returncode == 0
    assert host.files() == ["default.target.wants"]


def test_doctor_warns_when_the_installed_files_differ_from_what_install_writes_now(
    project: Project, host: Host
) -> None:
    healthy(project)
    assert project.cli("install", env=host.env).returncode == 0
    doctor = project.cli("doctor", "--json", env=host.env)
    checks = checks_by_name(doctor.stdout)
    assert checks["systemd unit"]["detail"] == f"{instance(project)} (user): inactive, enabled"
    assert "systemd unit files" not in checks
    project.write_config(agent("exits_with.py", "0"), agent={"sigterm_grace_s": 20})
    (host.unit_dir / TEMPLATE).write_text((host.unit_dir / TEMPLATE).read_text() + "Nice=5\n")
    checks = checks_by_name(project.cli("doctor", "--json", env=host.env).stdout)
    drift = checks["systemd unit files"]
    assert drift["status"] == "warn"
    assert str(host.unit_dir / TEMPLATE) in drift["detail"]
    assert str(host.unit_dir / f"{instance(project)}.d" / DROPIN) in drift["detail"]
    assert drift["fix"] == "run `agent-runner install` again (then restart the unit)"
    assert project.cli("install", env=host.env).returncode == 0
    checks = checks_by_name(project.cli("doctor", "--json", env=host.env).stdout)
    assert "systemd unit files" not in checks


def test_a_template_agent_runner_did_not_write_is_left_alone_unless_forced(
    project: Project, host: Host
) -> None:
    healthy(project)
    host.unit_dir.mkdir(parents=True)
    (host.unit_dir / TEMPLATE).write_text("[Service]\nExecStart=/usr/bin/mine\n")
    done = project.cli("install", env=host.env)
    assert done.returncode == 1
    assert "was not written by agent-runner; move it away or pass --force" in done.stderr
    assert (host.unit_dir / TEMPLATE).read_text() == "[Service]\nExecStart=/usr/bin/mine\n"
    assert project.cli("install", "--force", env=host.env).returncode == 0
    assert "agent-runner install" in (host.unit_dir / TEMPLATE).read_text()


def as_nobody(action: Callable[[], object]) -> object:
    """Run `action` in a forked child switched to uid/gid 65534; its result, or the error text.

    A fork, not an exec: this host's interpreter lives under /root, which 65534 cannot enter.
    """
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                result: object = action()
            except Exception as exc:
                result = f"{type(exc).__name__}: {exc}"
            os.write(write_end, json.dumps(result, default=str).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        data = reader.read()
    assert os.waitpid(child, 0)[1] == 0
    return json.loads(data)


def test_install_and_uninstall_as_an_unprivileged_user(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to set up another user's home")
    root = Path(tempfile.mkdtemp(prefix="ar-nobody-"))
    bus = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        work_dir = root / "proj"
        work_dir.mkdir()
        (work_dir / "prompt.md").write_text("work\n")
        (work_dir / "agent-runner.toml").write_text(
            'schema_version = 1\n[agent]\ncommand = ["true"]\nparser = "none"\n'
            '[prompt]\nfiles = ["prompt.md"]\n'
        )
        (root / "run").mkdir()
        bus.bind(str(root / "run" / "bus"))
        for path in (root, *root.rglob("*")):
            os.chown(path, 65534, 65534, follow_symlinks=False)
        root.chmod(0o755)
        env = {
            "HOME": str(root),
            # Only folders 65534 may enter: the fake's `env python3` must not stop at /root.
            "PATH": f"{FAKE_BIN}:/usr/local/bin:/usr/bin:/bin",
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_STATE_HOME": str(root / "state"),
            "XDG_RUNTIME_DIR": str(root / "run"),
            "FAKE_SYSTEMCTL_LOG": str(root / "systemctl.jsonl"),
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        nobody = Host(root / "config", root / "run", root / "systemctl.jsonl", env)

        def install(scope: Scope) -> list[str]:
            config = load_config(work_dir / "agent-runner.toml")
            account = Account("daemon", "daemon") if scope == "system" else None
            layout = Layout.for_scope(scope)
            if scope == "user":
                check_manager(scope)
            return apply_plan(
                plan_install(config, scope, layout, account=account, now=True, force=False)
            )

        unit = unit_name(str(work_dir))
        assert as_nobody(lambda: install("user"))[-1] == (  # type: ignore[index]
            f"systemctl --user enable --now '{unit}'"
        )
        assert {p.stat().st_uid for p in nobody.unit_dir.rglob("*")} == {65534}
        assert (root / "config" / "agent-runner" / "env").stat().st_mode & 0o777 == 0o700
        assert as_nobody(
            lambda: apply_plan(plan_uninstall(str(work_dir), "user", Layout.for_scope("user")))
        )
        assert nobody.files() == ["default.target.wants"]
        refused = as_nobody(lambda: install("system"))
        assert refused == (
            "SystemdError: cannot write /etc/systemd/system/agent-runner@.service: "
            "Permission denied (--system needs root: run it with sudo)"
        )
    finally:
        bus.close()
        shutil.rmtree(root)


def test_without_systemd_as_pid_1_a_system_install_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemdError, match=r"^systemd is not running on this host \(no .*/x\)$"):
        check_manager("system", booted=tmp_path / "x")
    (tmp_path / "x").mkdir()
    check_manager("system", booted=tmp_path / "x")


def test_user_flag_goes_with_system_only(project: Project, host: Host) -> None:
    healthy(project)
    done = project.cli("install", "--user", "nobody", env=host.env)
    assert done.returncode == 2
    assert "--user NAME goes with --system" in done.stderr


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.fail(
            "systemd-analyze is part of systemd (Debian package `systemd`); .ci/run installs it"
        )
    return found


def verify(
    scope: str, unit: Path, runtime_dir: Path, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    # No manager needs to run: verify loads the files itself. It does need the ExecStart
    # program to exist, and for --user a runtime directory to stand for the user's.
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir), "SYSTEMD_LOG_COLOR": "0"}
    as_nobody = home is not None
    if as_nobody:
        env = {k: v for k, v in env.items() if not k.startswith("XDG_") or k == "XDG_RUNTIME_DIR"}
        env["HOME"] = str(home)
    return subprocess.run(
        [systemd_analyze(), *(["--user"] if scope == "user" else []), "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        user=65534 if as_nobody else None,
        group=65534 if as_nobody else None,
        extra_groups=[] if as_nobody else None,
    )


def render_into(project: Project, root: Path, scope: str) -> Path:
    """The units install would write, under `root`; the instance's path for verify."""
    units = Layout(root / "units", root / "env")
    me = pwd.getpwuid(os.getuid())
    account = Account(me.pw_name, grp.getgrgid(me.pw_gid).gr_name) if scope == "system" else None
    config = load_config(project.config_path)
    for path, text in desired_files(config, scope, units, account).items():  # type: ignore[arg-type]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return units.unit_dir / instance(project)


@pytest.mark.parametrize("scope", ["user", "system"])
def test_the_rendered_units_pass_systemd_analyze_verify(
    project: Project, tmp_path: Path, scope: str
) -> None:
    healthy(project)
    unit = render_into(project, tmp_path, scope)
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir()
    done = verify(scope, unit, runtime_dir)
    # verify exits 0 even for unknown or unparsable settings; it only prints them.
    assert (done.returncode, done.stderr) == (0, "")
    dropin = unit.with_name(unit.name + ".d") / DROPIN
    dropin.write_text(dropin.read_text() + "NoSuchSetting=1\nKillMode=sideways\n")
    done = verify(scope, unit, runtime_dir)
    assert "Unknown key 'NoSuchSetting'" in done.stderr
    assert "kill mode" in done.stderr


def test_verify_fails_when_the_agent_runner_program_is_missing(
    project: Project, tmp_path: Path
) -> None:
    healthy(project)
    unit = render_into(project, tmp_path, "system")
    template = unit.parent / TEMPLATE
    program = exec_start()[0]
    template.write_text(template.read_text().replace(program, "/nonexistent/agent-runner"))
    done = verify("system", unit, tmp_path)
    assert done.returncode == 1
    assert "/nonexistent/agent-runner is not executable" in done.stderr


def test_the_user_unit_verifies_for_an_unprivileged_user(project: Project) -> None:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the test above covers it")
    healthy(project)
    root = Path(tempfile.mkdtemp(prefix="ar-verify-"))
    try:
        unit = render_into(project, root, "user")
        runtime_dir = root / "run"
        runtime_dir.mkdir()
        for path in (root, *root.rglob("*")):
            os.chown(path, 65534, 65534)
        root.chmod(0o755)
        done = verify("user", unit, runtime_dir, home=root)
        assert (done.returncode, done.stderr) == (0, "")
    finally:
        shutil.rmtree(root)


def layout(host: Host) -> Layout:
    return Layout(host.unit_dir, host.config_home / "agent-runner" / "env")


def cli(
    *args: str, env: dict[str, str], drop: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    for name in drop or []:
        full.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "agent_runner", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full,
        cwd=REPO,
    )
