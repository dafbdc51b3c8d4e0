"""`install` and `uninstall` as plans: the files to write or remove and the systemctl commands.

A plan is data built from the config and the host's layout, so `--dry-run` prints exactly what
applying it does, and doctor compares the installed files with the ones a plan would write.
"""

from __future__ import annotations

import errno
import grp
import hashlib
import os
import pwd
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_runner.config import CONFIG_NAME, Config
from agent_runner.errors import SystemdError
from agent_runner.systemd.names import (
    PREFIX,
    TEMPLATE,
    check_project_dir,
    unescape_path,
    unit_name,
)
from agent_runner.systemd.systemctl import Systemctl
from agent_runner.systemd.unit import (
    DROPIN,
    MARKER,
    ProjectUnit,
    Scope,
    render_dropin,
    render_template,
)

NOBODY_UID = 65534
# The default log_dir depends on it: a service without it would lock another folder than the
# CLI does, and a serve started by hand could run next to the unit's.
PINNED_IF_SET = ("XDG_STATE_HOME",)
# systemd's own rule for user and group names (valid_user_group_name, relaxed mode).
_ACCOUNT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")


@dataclass(frozen=True)
class Layout:
    """Where a manager's units live, and where a project's API-key file goes."""

    unit_dir: Path
    env_dir: Path

    @classmethod
    def for_scope(cls, scope: Scope, environ: Mapping[str, str] | None = None) -> Layout:
        if scope == "system":
            # PID 1 reads EnvironmentFile= as root: a file in the project user's home could be
            # a symlink to /etc/shadow, handing its contents to the service. /etc is root's.
            return cls(Path("/etc/systemd/system"), Path("/etc/agent-runner/env"))
        env = os.environ if environ is None else environ
        config_home = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return cls(config_home / "systemd" / "user", config_home / "agent-runner" / "env")

    def dropin(self, unit: str) -> Path:
        return self.unit_dir / f"{unit}.d" / DROPIN


@dataclass(frozen=True)
class Account:
    user: str
    group: str


def project_dir(config_path: Path) -> str:
    """The folder an instance stands for: where agent-runner.toml is, symlinks resolved."""
    return os.path.realpath(config_path.absolute().parent)


def service_account(requested: str | None, environ: Mapping[str, str] | None = None) -> Account:
    """Who a system unit runs the project as: --user NAME, else the sudo caller, else the caller.

    Root only when asked for by name: agents run arbitrary commands.
    """
    env = os.environ if environ is None else environ
    name = requested or env.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name
    if name == "root" and requested != "root":
        raise SystemdError(
            "--system would run the project as root; run install through sudo from the "
            "account that should run it, name one with --user NAME, or pass --user root"
        )
    if not _ACCOUNT_RE.match(name):
        raise SystemdError(f"--user {name!r} is not a valid user name")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SystemdError(f"--user {name!r}: no such user on this host") from None
    if entry.pw_uid == NOBODY_UID:
        # It owns every file a user namespace cannot map: not an account to run agents as.
        raise SystemdError(f"--user {name!r} is the overflow user; name a real account")
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = str(entry.pw_gid)
    return Account(name, group)


def exec_start() -> tuple[str, ...]:
    """This installation of agent-runner: its console script, else its interpreter with -m."""
    script = Path(sys.executable).parent / "agent-runner"
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    return (sys.executable, "-m", "agent_runner")


def env_file(project: str, layout: Layout) -> Path:
    """`<env_dir>/<folder name>-<8 hex of the folder>.env`."""
    digest = hashlib.sha256(project.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return layout.env_dir / f"{Path(project).name or 'root'}-{digest}.env"


def desired_files(
    config: Config,
    scope: Scope,
    layout: Layout,
    account: Account | None,
    environ: Mapping[str, str] | None = None,
) -> dict[Path, str]:
    """The template and the project's drop-in, as install would write them now."""
    env = os.environ if environ is None else environ
    if config.path.name != CONFIG_NAME:
        raise SystemdError(
            f"{config.path}: the unit runs {CONFIG_NAME} from the project folder; "
            f"rename the config to {CONFIG_NAME}"
        )
    project = check_project_dir(project_dir(config.path))
    if scope == "system" and account is None:
        raise SystemdError("a system unit needs an account to run the project as")
    unit = ProjectUnit(
        project_dir=project,
        scope=scope,
        environment=(
            ("PATH", env.get("PATH") or os.defpath),
            *((name, env[name]) for name in PINNED_IF_SET if env.get(name)),
        ),
        environment_file=str(env_file(project, layout)),
        sigterm_grace_s=config.agent.sigterm_grace_s,
        writable=(str(config.runtime.work_dir), str(config.runtime.log_dir)),
        user=account.user if account else None,
        group=account.group if account else None,
    )
    return {
        layout.unit_dir / TEMPLATE: render_template(scope, exec_start()),
        layout.dropin(unit_name(project)): render_dropin(unit),
    }


@dataclass(frozen=True)
class Step:
    """One thing a plan does: write or remove a file, remove an empty folder, run systemctl."""

    action: Literal["mkdir", "write", "remove", "rmdir", "run"]
    path: Path | None = None
    text: str = ""
    argv: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.action == "run":
            return shlex.join(self.argv)
        return f"{self.action} {self.path}"


@dataclass(frozen=True)
class Plan:
    unit: str
    scope: Scope
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        """What `--dry-run` prints: each file's content, then every step in order."""
        out = []
        for step in self.steps:
            if step.action == "write":
                out += [f"# {step.path}", step.text.rstrip("\n"), ""]
        out.append("# steps")
        out += [step.describe() for step in self.steps]
        return "\n".join(out)


def plan_install(
    config: Config,
    scope: Scope,
    layout: Layout,
    *,
    account: Account | None,
    now: bool,
    force: bool,
    environ: Mapping[str, str] | None = None,
) -> Plan:
    files = desired_files(config, scope, layout, account, environ)
    template = layout.unit_dir / TEMPLATE
    current = _read(template)
    if current is not None and not current.startswith(MARKER) and not force:
        raise SystemdError(
            f"{template} was not written by agent-runner; move it away or pass --force"
        )
    unit = unit_name(project_dir(config.path))
    systemctl = Systemctl(scope)
    user_flag = "--user " if scope == "user" else ""
    environment_file = env_file(project_dir(config.path), layout)
    steps = [Step("write", path, text) for path, text in files.items()]
    if not environment_file.parent.is_dir():
        steps.append(Step("mkdir", environment_file.parent))
    steps.append(Step("run", argv=tuple(systemctl.argv("daemon-reload"))))
    enable = ("enable", "--now", unit) if now else ("enable", unit)
    steps.append(Step("run", argv=tuple(systemctl.argv(*enable))))
    notes = [
        f"API keys: KEY=value lines in {environment_file} (chmod 600), read at every start",
        f"logs: journalctl {user_flag}-u {shlex.quote(unit)} -f",
    ]
    if not now:
        notes.insert(0, f"start it: systemctl {user_flag}start {shlex.quote(unit)}")
    return Plan(unit, scope, tuple(steps), tuple(notes))


def plan_uninstall(project: str, scope: Scope, layout: Layout) -> Plan:
    """Stop, disable and remove the project's instance; the template too when it was the last."""
    unit = unit_name(project)
    dropin = layout.dropin(unit)
    if not dropin.exists() and unit not in _enabled_instances(layout, exclude=None):
        raise SystemdError(f"{unit} is not installed for the {scope} manager ({layout.unit_dir})")
    systemctl = Systemctl(scope)
    steps = [Step("run", argv=tuple(systemctl.argv("disable", "--now", unit)))]
    if dropin.exists():
        steps.append(Step("remove", dropin))
        if [p.name for p in dropin.parent.iterdir()] == [DROPIN]:
            steps.append(Step("rmdir", dropin.parent))
    others = _other_instances(layout, unit)
    notes = []
    if others:
        folders = ", ".join(sorted(_folder(name) for name in others))
        notes.append(f"{TEMPLATE} stays: other projects use it ({folders})")
    elif (layout.unit_dir / TEMPLATE).exists():
        steps.append(Step("remove", layout.unit_dir / TEMPLATE))
    steps.append(Step("run", argv=tuple(systemctl.argv("daemon-reload"))))
    return Plan(unit, scope, tuple(steps), tuple(notes))


def apply_plan(plan: Plan) -> list[str]:
    """Carry out every step in order; the steps done, as lines to print."""
    systemctl = Systemctl(plan.scope)
    done = []
    for step in plan.steps:
        if step.action == "run":
            systemctl.run(step.argv)
        else:
            assert step.path is not None
            _change_file(step)
        done.append(step.describe())
    return done


def _change_file(step: Step) -> None:
    assert step.path is not None
    path = step.path
    try:
        if step.action == "write":
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_name(f".{path.name}.tmp")
            temp.write_text(step.text, "utf-8")
            temp.chmod(0o644)
            temp.replace(path)
        elif step.action == "mkdir":
            # Only its owner may list or read the API-key files in it.
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        elif step.action == "remove":
            path.unlink(missing_ok=True)
        else:
            path.rmdir()
    except OSError as exc:
        hint = " (--system needs root: run it with sudo)" if exc.errno == errno.EACCES else ""
        raise SystemdError(f"cannot {step.action} {path}: {exc.strerror}{hint}") from None


def _other_instances(layout: Layout, unit: str) -> set[str]:
    """Instances of the template other than `unit`: installed drop-ins or enablement links."""
    installed = {
        path.parent.name.removesuffix(".d")
        for path in layout.unit_dir.glob(f"{PREFIX}@?*.service.d/{DROPIN}")
    }
    return (installed | _enabled_instances(layout, exclude=unit)) - {unit}


def _folder(unit: str) -> str:
    """`agent-runner@home-me-proj.service` -> `/home/me/proj` (the name itself if not a path)."""
    try:
        return unescape_path(unit.removeprefix(f"{PREFIX}@").removesuffix(".service"))
    except SystemdError:
        return unit


def _enabled_instances(layout: Layout, exclude: str | None) -> set[str]:
    links = layout.unit_dir.glob(f"*.wants/{PREFIX}@?*.service")
    return {link.name for link in links if link.name != exclude}


def _read(path: Path) -> str | None:
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemdError(f"{path}: cannot read: {exc}") from None
