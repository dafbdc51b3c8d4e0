"""The systemd side of a project: its unit instance name and, when installed, the unit's state."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

TEMPLATE = "agent-runner@.service"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.")
SYSTEMCTL_TIMEOUT_S = 5.0


def escape_path(path: Path) -> str:
    """`systemd-escape --path`: the instance name systemd derives from a folder."""
    parts = [part for part in str(path).split("/") if part]
    if not parts:
        return "-"
    text = "/".join(parts)
    out = []
    for index, char in enumerate(text):
        if char == "/":
            out.append("-")
        elif char in _SAFE and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode())
    return "".join(out)


def unit_name(work_dir: Path) -> str:
    return f"agent-runner@{escape_path(work_dir)}.service"


def unit_dirs() -> dict[str, Path]:
    """Where `install` puts the template: per user, and for the system."""
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return {"user": Path(config_home) / "systemd" / "user", "system": Path("/etc/systemd/system")}


def unit_state(work_dir: Path, dirs: dict[str, Path] | None = None) -> dict[str, Any] | None:
    """The unit's state if the template is installed (user or system), else None."""
    for scope, folder in (dirs or unit_dirs()).items():
        if (folder / TEMPLATE).exists():
            name = unit_name(work_dir)
            return {"unit": name, "scope": scope, "active": _systemctl(scope, "is-active", name)}
    return None


def _systemctl(scope: str, verb: str, unit: str) -> str:
    argv = ["systemctl", *(["--user"] if scope == "user" else []), verb, unit]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SYSTEMCTL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc.__class__.__name__})"
    return done.stdout.strip() or f"unknown ({done.stderr.strip()[:80]})"
