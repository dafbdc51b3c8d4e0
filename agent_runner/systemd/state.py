"""A project's installed unit: which manager has it, its state, and whether it is current."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agent_runner.config import Config
from agent_runner.errors import SystemdError
from agent_runner.systemd.install import Account, Layout, desired_files, project_dir
from agent_runner.systemd.names import PREFIX, unescape_path, unit_name
from agent_runner.systemd.systemctl import Systemctl
from agent_runner.systemd.unit import DROPIN, SCOPES, Scope

MAX_INSTANCES = 10_000  # per manager; a folder holding more is not agent-runner's doing


def installed_scope(config: Config) -> Scope | None:
    """The manager whose unit folder holds this project's drop-in, or None."""
    try:
        unit = unit_name(project_dir(config.path))
    except SystemdError:
        return None
    for scope in SCOPES:
        if Layout.for_scope(scope).dropin(unit).is_file():
            return scope
    return None


def installed_instances() -> list[tuple[str, Scope, str]]:
    """Every project `install` set up, read from the unit folders (no systemctl): its unit
    name, its manager, and the project folder the name stands for."""
    found = []
    for scope in SCOPES:
        folder = Layout.for_scope(scope).unit_dir
        try:
            entries = [e.name for e in os.scandir(folder)][:MAX_INSTANCES]
        except OSError:
            continue
        for name in sorted(entries):
            unit = name.removesuffix(".d")
            if not (name.endswith(".service.d") and unit.startswith(f"{PREFIX}@")):
                continue
            if unit == f"{PREFIX}@.service" or not (folder / name / DROPIN).is_file():
                continue
            try:
                project = unescape_path(unit.removeprefix(f"{PREFIX}@").removesuffix(".service"))
            except SystemdError:
                continue
            found.append((unit, scope, project))
    return found


def unit_state(config: Config) -> dict[str, Any] | None:
    """The instance's name, manager, active and enabled state; None when it is not installed."""
    scope = installed_scope(config)
    if scope is None:
        return None
    unit = unit_name(project_dir(config.path))
    systemctl = Systemctl(scope)
    return {
        "unit": unit,
        "scope": scope,
        "active": systemctl.query("is-active", unit),
        "enabled": systemctl.query("is-enabled", unit),
    }


def unit_drift(config: Config, scope: Scope) -> list[str]:
    """The installed files that differ from what `install` would write now (each a path)."""
    layout = Layout.for_scope(scope)
    unit = unit_name(project_dir(config.path))
    account = _installed_account(layout.dropin(unit)) if scope == "system" else None
    try:
        wanted = desired_files(config, scope, layout, account)
    except SystemdError as exc:
        return [f"cannot render the unit now: {exc}"]
    return [str(path) for path, text in wanted.items() if _read(path) != text]


def _installed_account(dropin: Path) -> Account | None:
    """User= and Group= as the installed drop-in names them (who install was told to run as)."""
    values = {}
    for line in (_read(dropin) or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("User", "Group"):
            values[key] = value
    if "User" in values and "Group" in values:
        return Account(values["User"], values["Group"])
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
