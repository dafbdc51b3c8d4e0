"""Running `systemctl` for one manager (the user's or the system's): the one place it is started."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import SystemdError
from agent_runner.systemd.unit import Scope

SYSTEMCTL_TIMEOUT_S = 30.0
QUERY_TIMEOUT_S = 5.0
# How systemctl says it reached no manager (no user session bus, or no systemd at all).
_NO_MANAGER = (
    "Failed to connect to bus",
    "DBUS_SESSION_BUS_ADDRESS",
    "System has not been booted with systemd",
    "Failed to connect to user scope bus",
)


@dataclass(frozen=True)
class Systemctl:
    scope: Scope

    def argv(self, *args: str) -> list[str]:
        return ["systemctl", *(["--user"] if self.scope == "user" else []), *args]

    def run(self, args: Sequence[str]) -> None:
        """Run one command line made by `argv`; SystemdError with systemctl's reason on failure."""
        try:
            done = subprocess.run(
                list(args),
                capture_output=True,
                text=True,
                timeout=SYSTEMCTL_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise SystemdError("systemctl is not installed: does this host run systemd?") from None
        except subprocess.TimeoutExpired:
            raise SystemdError(
                f"`{' '.join(args)}` did not answer within {SYSTEMCTL_TIMEOUT_S:g}s"
            ) from None
        if done.returncode != 0:
            reason = (done.stderr.strip() or done.stdout.strip()).splitlines()
            first = reason[0] if reason else f"exit status {done.returncode}"
            if any(sign in first for sign in _NO_MANAGER):
                raise SystemdError(f"{' '.join(args)}: {first}; {no_manager_hint(self.scope)}")
            raise SystemdError(f"{' '.join(args)}: {first}")

    def query(self, verb: str, unit: str) -> str:
        """`is-active` / `is-enabled` as one word, or `unknown (why)` when there is no answer."""
        try:
            done = subprocess.run(
                self.argv(verb, unit),
                capture_output=True,
                text=True,
                timeout=QUERY_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unknown ({exc.__class__.__name__})"
        answer = done.stdout.strip()
        if answer and "\n" not in answer:
            return answer
        why = (done.stderr.strip() or answer or f"exit status {done.returncode}").splitlines()[0]
        return f"unknown ({why[:80]})"


def check_manager(
    scope: Scope,
    environ: Mapping[str, str] | None = None,
    booted: Path = Path("/run/systemd/system"),
) -> None:
    """SystemdError explaining the fix when the manager `scope` names cannot be reached.

    systemd as PID 1 creates `booted` (sd_booted). The user manager listens on
    $XDG_RUNTIME_DIR/bus; without a login session (su, cron, ssh without PAM) neither exists.
    """
    if scope == "system":
        if not booted.is_dir():
            raise SystemdError(f"systemd is not running on this host (no {booted})")
        return
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if not runtime:
        raise SystemdError(f"XDG_RUNTIME_DIR is not set; {no_manager_hint(scope)}")
    try:
        is_socket = stat.S_ISSOCK(os.stat(Path(runtime) / "bus").st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        raise SystemdError(
            f"no systemd user manager listens on {runtime}/bus; {no_manager_hint(scope)}"
        )


def no_manager_hint(scope: Scope) -> str:
    if scope == "system":
        return "is systemd running on this host (PID 1)?"
    return (
        "log in to a session of this user (not `su`), or run "
        "`sudo loginctl enable-linger $USER` so the user manager runs without one, then "
        "`export XDG_RUNTIME_DIR=/run/user/$(id -u)`"
    )
