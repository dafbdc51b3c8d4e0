"""The template and a project's drop-in, rendered from data (systemd-analyze checks them too)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_runner.errors import ExitCode, SystemdError
from agent_runner.supervisor.loop.stopping import STOP_FILE_CHECK_S
from agent_runner.systemd.unit import (
    HARDENING,
    ProjectUnit,
    render_dropin,
    render_template,
    secure_tree_s,
    stop_timeout_s,
    watchdog_s,
)

EXE = ("/opt/agent runner/bin/agent-runner",)
PROJECT = ProjectUnit(
    project_dir="/home/me/proj",
    scope="user",
    environment=(("PATH", "/usr/bin:/bin"), ("XDG_STATE_HOME", "/home/me/state")),
    environment_file="/home/me/.config/agent-runner/env/proj-12345678.env",
    sigterm_grace_s=10,
    writable=("/home/me/proj", "/home/me/.local/state/agent-runner/proj-12345678"),
)
SYSTEM_PROJECT = dataclasses.replace(PROJECT, scope="system", user="me", group="staff")


def settings(text: str) -> dict[str, list[str]]:
    """`Section.Key` -> every value assigned, comments and blank lines left out."""
    found: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(f"{section}.{key}", []).append(value)
    return found


def test_restart_prevent_exit_status_lists_the_codes_restarting_cannot_fix() -> None:
    values = settings(render_template("user", EXE))["Service.RestartPreventExitStatus"]
    assert values == ["69 73 78"]
    assert {ExitCode(int(code)) for code in values[0].split()} == {
        ExitCode.GAVE_UP,
        ExitCode.LOCKED,
        ExitCode.CONFIG,
    }


def test_the_template_runs_serve_as_a_notify_service_with_a_delegated_cgroup() -> None:
    unit = settings(render_template("user", EXE))
    assert unit["Service.ExecStart"] == [
        '"/opt/agent runner/bin/agent-runner" serve "--config=%f/agent-runner.toml"'
    ]
    expected = {
        "Service.Type": ["notify"],
        "Service.NotifyAccess": ["main"],
        "Service.WorkingDirectory": ["%f"],
        "Service.Restart": ["on-failure"],
        "Service.KillMode": ["mixed"],
        "Service.KillSignal": ["SIGTERM"],
        "Service.Delegate": ["yes"],
        "Unit.StartLimitBurst": ["5"],
        "Unit.StartLimitIntervalSec": ["600"],
        "Install.WantedBy": ["default.target"],
    }
    assert {key: unit[key] for key in expected} == expected


def test_user_units_leave_out_settings_that_need_user_namespaces() -> None:
    user, system = (settings(render_template(scope, EXE)) for scope in ("user", "system"))
    namespaced = {f"Service.{d.key}" for d in HARDENING if d.scopes == ("system",)}
    assert namespaced == {
        "Service.ProtectSystem",
        "Service.PrivateTmp",
        "Service.ProtectKernelTunables",
        "Service.ProtectKernelModules",
        "Service.ProtectKernelLogs",
    }
    assert not namespaced & user.keys()
    assert namespaced <= system.keys()
    assert user["Service.NoNewPrivileges"] == system["Service.NoNewPrivileges"] == ["yes"]
    assert system["Install.WantedBy"] == ["multi-user.target"]
    assert system["Unit.After"] == ["network-online.target"]


def test_the_template_never_makes_the_cgroup_tree_read_only() -> None:
    # ProtectControlGroups= would take away the subtree Delegate=yes hands to serve.
    for scope in ("user", "system"):
        assert "Service.ProtectControlGroups" not in settings(render_template(scope, EXE))


def test_the_drop_in_carries_the_projects_own_settings() -> None:
    dropin = settings(render_dropin(PROJECT))
    assert dropin == {
        "Service.Environment": ['"PATH=/usr/bin:/bin"', '"XDG_STATE_HOME=/home/me/state"'],
        "Service.EnvironmentFile": ["-/home/me/.config/agent-runner/env/proj-12345678.env"],
        "Service.TimeoutStopSec": ["145"],
        "Service.WatchdogSec": ["290"],
    }


def test_a_system_drop_in_names_the_account_and_keeps_the_project_writable() -> None:
    dropin = settings(render_dropin(SYSTEM_PROJECT))
    assert dropin["Service.User"] == ["me"]
    assert dropin["Service.Group"] == ["staff"]
    assert dropin["Service.ReadWritePaths"] == [
        "-/home/me/proj -/home/me/.local/state/agent-runner/proj-12345678"
    ]


def test_stop_timeout_covers_the_grace_and_securing_the_tree() -> None:
    assert stop_timeout_s(10) == 10 + secure_tree_s() + 15
    assert stop_timeout_s(0.5) == 136
    assert settings(render_dropin(dataclasses.replace(PROJECT, sigterm_grace_s=30)))[
        "Service.TimeoutStopSec"
    ] == ["165"]


@given(st.floats(min_value=0, max_value=3600))
def test_half_the_watchdog_outlasts_the_longest_stretch_serve_goes_without_a_ping(
    grace_s: float,
) -> None:
    # serve pings at half of WatchdogSec; it is quiet during a stop's grace and while it
    # secures the tree, and a ping may be one tick late.
    assert watchdog_s(grace_s) / 2 > grace_s + secure_tree_s() + STOP_FILE_CHECK_S


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"environment": (("PATH", "/bin:/home/me/100%"),)}, "PATH"),
        ({"environment_file": "/x/a\nExecStartPre=/bin/evil"}, "environment file"),
        ({"project_dir": '/home/me/"proj"'}, "project folder"),
    ],
)
def test_every_literal_value_in_a_drop_in_is_checked(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(SystemdError, match=f"^{message} .* contains"):
        render_dropin(dataclasses.replace(PROJECT, **change))


@pytest.mark.parametrize(("user", "group"), [("me\nUser=root", "me"), ("me", "g%i")])
def test_account_names_in_a_system_drop_in_are_checked(user: str, group: str) -> None:
    with pytest.raises(SystemdError, match=r"^(user|group) .* contains"):
        render_dropin(dataclasses.replace(SYSTEM_PROJECT, user=user, group=group))


def test_an_agent_runner_path_with_unit_syntax_is_refused() -> None:
    with pytest.raises(SystemdError, match=r"^agent-runner path .* contains '\$'"):
        render_template("user", ("/opt/$x/agent-runner",))
