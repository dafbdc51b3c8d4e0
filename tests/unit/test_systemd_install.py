"""Who a system unit runs as, where the files go, and which agent-runner the unit starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from agent_runner.errors import SystemdError
from agent_runner.systemd.install import Layout, env_file, exec_start, service_account


def test_a_system_unit_runs_as_the_sudo_caller() -> None:
    account = service_account(None, {"SUDO_USER": "daemon"})
    assert (account.user, account.group) == ("daemon", "daemon")


def test_an_explicit_user_wins_over_the_sudo_caller() -> None:
    assert service_account("daemon", {"SUDO_USER": "root"}).user == "daemon"


def test_root_runs_a_project_only_when_named() -> None:
    if os.geteuid() != 0:
        pytest.skip("the caller is not root here")
    with pytest.raises(SystemdError, match="would run the project as root"):
        service_account(None, {})
    with pytest.raises(SystemdError, match="would run the project as root"):
        service_account(None, {"SUDO_USER": "root"})
    assert service_account("root", {}).user == "root"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no-such-user-here", "no such user on this host"),
        ("me\nUser=root", "is not a valid user name"),
        ("-rf", "is not a valid user name"),
        ("nobody", "is the overflow user"),
    ],
)
def test_unusable_accounts_are_refused(name: str, message: str) -> None:
    with pytest.raises(SystemdError, match=message):
        service_account(name, {})


def test_user_units_and_key_files_live_under_xdg_config_home(tmp_path: Path) -> None:
    layout = Layout.for_scope("user", {"XDG_CONFIG_HOME": str(tmp_path)})
    assert layout == Layout(tmp_path / "systemd" / "user", tmp_path / "agent-runner" / "env")


def test_system_units_read_key_files_only_from_etc() -> None:
    assert Layout.for_scope("system", {"XDG_CONFIG_HOME": "/home/me/.config"}) == Layout(
        Path("/etc/systemd/system"), Path("/etc/agent-runner/env")
    )


def test_each_project_has_its_own_key_file() -> None:
    layout = Layout(Path("/u"), Path("/keys"))
    first, second = env_file("/home/me/proj", layout), env_file("/srv/proj", layout)
    assert first.parent == second.parent == Path("/keys")
    assert first.name.startswith("proj-")
    assert first != second


def test_the_unit_starts_this_installation_of_agent_runner() -> None:
    program = exec_start()
    assert program[0] == str(Path(sys.executable).parent / "agent-runner")
    assert os.access(program[0], os.X_OK)
