"""The unit files `install` writes, rendered from data: one shared template, one drop-in a project.

The template `agent-runner@.service` holds what every project on the host shares; a project's
drop-in holds what depends on it (its user, PATH, API-key file, timeouts from its config).
Every literal value passes `check_unit_text` before it is written; pure, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from agent_runner.errors import ExitCode
from agent_runner.systemd.names import check_unit_text

Scope = Literal["user", "system"]
SCOPES: tuple[Scope, ...] = ("user", "system")

# Exits that restarting cannot fix: a breaker gave up (burning quota), another serve holds
# the lock, the configuration is wrong. systemd restarts everything else (1, signals, watchdog).
NO_RESTART = (ExitCode.GAVE_UP, ExitCode.LOCKED, ExitCode.CONFIG)
RESTART_SEC = 10
# A serve that keeps crashing on start is given up on after this many starts in this window.
START_LIMIT_BURST = 5
START_LIMIT_INTERVAL_S = 600
STOP_MARGIN_S = 15
MARKER = "# Written by `agent-runner install`"
DROPIN = "agent-runner.conf"


@dataclass(frozen=True)
class Directive:
    """One hardening setting, the scopes it is written for, and why it is safe for agents."""

    key: str
    value: str
    why: str
    scopes: tuple[Scope, ...] = SCOPES


# Agents build, test, install packages into their caches and run git: every setting here keeps
# that working. Mount-namespace settings are for the system manager only: a user manager applies
# them only with PrivateUsers=, which needs unprivileged user namespaces (the start fails where
# those are off) and shows other accounts' files as nobody's. docs/systemd.md has the reasons.
HARDENING = (
    Directive(
        "NoNewPrivileges",
        "yes",
        "no setuid/file-capability gain: a prompt-injected agent cannot sudo",
    ),
    Directive(
        "ProtectSystem",
        "full",
        "/usr, /boot and /etc read-only; home, /var and the project stay writable",
        ("system",),
    ),
    Directive("PrivateTmp", "yes", "the agent's /tmp is its own, emptied on stop", ("system",)),
    Directive(
        "ProtectKernelTunables",
        "yes",
        "/proc/sys and /sys read-only; /sys/fs/cgroup stays writable for Delegate=",
        ("system",),
    ),
    Directive("ProtectKernelModules", "yes", "no kernel module loading", ("system",)),
    Directive("ProtectKernelLogs", "yes", "no access to the kernel log buffer", ("system",)),
)


@dataclass(frozen=True)
class ProjectUnit:
    """What one project's drop-in says; `user`/`group` only for the system manager."""

    project_dir: str
    scope: Scope
    environment: tuple[tuple[str, str], ...]
    environment_file: str
    sigterm_grace_s: float
    writable: tuple[str, ...] = ()
    user: str | None = None
    group: str | None = None


def secure_tree_s() -> float:
    """Securing the work tree after the agent stopped: up to two git calls at their timeout."""
    from agent_runner.vcs import GIT_TIMEOUT_S  # noqa: PLC0415 -- `status` needs no git module

    return 2 * GIT_TIMEOUT_S


def stop_timeout_s(sigterm_grace_s: float) -> int:
    """TimeoutStopSec: the agent's grace, then securing the work tree, then a margin."""
    return math.ceil(sigterm_grace_s + secure_tree_s() + STOP_MARGIN_S)


def watchdog_s(sigterm_grace_s: float) -> int:
    """WatchdogSec: serve pings at half of it and is quiet for at most one stop's length."""
    return 2 * stop_timeout_s(sigterm_grace_s)


def render_template(scope: Scope, exec_start: Sequence[str]) -> str:
    """`agent-runner@.service` for the user or the system manager."""
    program = " ".join(_word(check_unit_text(arg, "agent-runner path")) for arg in exec_start)
    codes = " ".join(str(int(code)) for code in NO_RESTART)
    meanings = ", ".join(f"{int(code)} {code.name.lower()}" for code in NO_RESTART)
    network = ["Wants=network-online.target", "After=network-online.target"]
    lines = [
        f"{MARKER}; one instance per project folder:",
        "# agent-runner@<systemd-escape --path FOLDER>.service, and %f is that folder.",
        "[Unit]",
        "Description=agent-runner supervising %f",
        *(network if scope == "system" else []),
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL_S}",
        f"StartLimitBurst={START_LIMIT_BURST}",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f'ExecStart={program} serve "--config=%f/agent-runner.toml"',
        "WorkingDirectory=%f",
        "SyslogIdentifier=agent-runner",
        "Restart=on-failure",
        f"RestartSec={RESTART_SEC}",
        f"# Not restarted: {meanings}.",
        f"RestartPreventExitStatus={codes}",
        "# serve stops the agent's group itself; the rest of the cgroup is killed at the timeout.",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        "# serve may give each round a cgroup of its own below the service's.",
        "Delegate=yes",
        *_hardening(scope),
        "",
        "[Install]",
        f"WantedBy={'default.target' if scope == 'user' else 'multi-user.target'}",
    ]
    return "\n".join(lines) + "\n"


def render_dropin(project: ProjectUnit) -> str:
    """`agent-runner@<instance>.service.d/agent-runner.conf`: the project's own settings."""
    folder = check_unit_text(project.project_dir, "project folder")
    grace = project.sigterm_grace_s
    lines = [f"{MARKER} for {folder}; running it again rewrites this file.", "[Service]"]
    if project.scope == "system":
        assert project.user is not None
        assert project.group is not None
        lines += [
            f"User={check_unit_text(project.user, 'user')}",
            f"Group={check_unit_text(project.group, 'group')}",
        ]
    lines += [
        "# As install ran: the agent's command is found where doctor found it, and serve",
        "# uses the log_dir (and so the lock) the CLI in your shell uses.",
        *(
            f'Environment="{name}={check_unit_text(value, name)}"'
            for name, value in project.environment
        ),
        "# API keys as KEY=value lines; optional (the leading '-').",
        f"EnvironmentFile=-{check_unit_text(project.environment_file, 'environment file')}",
    ]
    if project.scope == "system" and project.writable:
        paths = " ".join(
            _word("-" + check_unit_text(path, "writable path")) for path in project.writable
        )
        lines.append(f"ReadWritePaths={paths}")
    lines += [
        f"# sigterm_grace_s ({grace:g}) + securing the work tree ({secure_tree_s():g}) + "
        f"{STOP_MARGIN_S}.",
        f"TimeoutStopSec={stop_timeout_s(grace)}",
        "# serve pings at half of this; its longest quiet stretch is one stop.",
        f"WatchdogSec={watchdog_s(grace)}",
    ]
    return "\n".join(lines) + "\n"


def _hardening(scope: Scope) -> Iterable[str]:
    for directive in HARDENING:
        if scope in directive.scopes:
            yield f"# {directive.why}"
            yield f"{directive.key}={directive.value}"


def _word(text: str) -> str:
    # Double quotes keep a word with spaces whole; check_unit_text has refused `"` and `\`.
    return f'"{text}"' if any(char.isspace() for char in text) else text
