"""Unit naming matches systemd's own escaping; the unit state is reported only when installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from agent_runner.systemd import TEMPLATE, escape_path, unit_dirs, unit_name, unit_state

PATHS = ["/home/me/proj", "/", "/work/main//a/", "/home/me/my proj/.x-y", "/srv/ünï", "/a/.hidden"]


@pytest.mark.parametrize("path", PATHS)
def test_escape_matches_systemd_escape(path: str) -> None:
    if shutil.which("systemd-escape") is None:
        pytest.fail("systemd-escape is part of systemd; install it to compare against")
    expected = subprocess.run(
        ["systemd-escape", "--path", path], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert escape_path(Path(path)) == expected


def test_unit_name_is_a_template_instance() -> None:
    assert unit_name(Path("/home/me/proj")) == "agent-runner@home-me-proj.service"


def test_no_installed_template_means_no_unit_state(tmp_path: Path) -> None:
    dirs = {"user": tmp_path / "user", "system": tmp_path / "system"}
    assert unit_state(Path("/home/me/proj"), dirs) is None


def test_user_units_live_under_xdg_config_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert unit_dirs()["user"] == tmp_path / "systemd" / "user"


def test_installed_template_reports_the_instance_state(tmp_path: Path) -> None:
    dirs = {"user": tmp_path / "user", "system": tmp_path / "system"}
    dirs["user"].mkdir()
    (dirs["user"] / TEMPLATE).write_text("[Service]\n")
    state = unit_state(Path("/home/me/proj"), dirs)
    assert state is not None
    assert state["unit"] == "agent-runner@home-me-proj.service"
    assert state["scope"] == "user"
    assert state["active"]  # "inactive", or "unknown (...)" where no user bus runs
