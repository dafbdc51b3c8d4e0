"""The boot checks: what must hold before serve starts a single round, or it exits 78.

serve at boot, a live reload, `doctor` and `install` run this one list, so none of them can
pass a config another refuses. Each check only reads; a failure's detail names the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_runner import vcs
from agent_runner.config import Config, did_you_mean, read_prompt
from agent_runner.errors import ConfigError, GitError
from agent_runner.events import REGISTRY
from agent_runner.parsers import PARSER_NAMES
from agent_runner.supervisor.agent import landlock
from agent_runner.supervisor.agent.program import Program, find_program
from agent_runner.supervisor.agent.writepolicy import verdict

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class CheckResult:
    """One line of `doctor`: a check's name, its status, what it found and how to fix it."""

    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Found:
    """What a check function found: `ok` or not, and the detail (for a failure: `key: why`)."""

    ok: bool
    detail: str


@dataclass(frozen=True)
class BootCheck:
    name: str
    fix: str
    inspect: Callable[[Config], Found]
    on_reload: bool  # also decides whether an edited config may be applied while serve runs

    def run(self, config: Config) -> CheckResult:
        found = self.inspect(config)
        if found.ok:
            return CheckResult(self.name, "ok", found.detail)
        return CheckResult(self.name, "fail", found.detail, self.fix)


def _work_dir(config: Config) -> Found:
    work_dir = config.runtime.work_dir
    if not work_dir.is_dir():
        return Found(False, f"runtime.work_dir: {work_dir} is not a directory")
    return Found(True, str(work_dir))


def _agent_command(config: Config) -> Found:
    program = config.agent.command[0]
    found = find_program(
        program,
        work_dir=config.runtime.work_dir,
        search_path=config.agent.env.get("PATH", os.environ.get("PATH")),
    )
    if found.problem is not None:
        return Found(False, f"agent.command: {found.problem}")
    return Found(True, f"{program} -> {found.path}")


def _parser(config: Config) -> Found:
    parser = config.agent.parser
    if parser not in PARSER_NAMES:
        return Found(
            False,
            f"agent.parser: unknown parser {parser!r}; builtin parsers: "
            f"{', '.join(sorted(PARSER_NAMES))} (a plugin cannot be the parser in this version)",
        )
    return Found(True, parser)


def _log_dir(config: Config) -> Found:
    log_dir = config.runtime.log_dir
    problem = log_dir_problem(log_dir)
    if problem is not None:
        return Found(False, f"runtime.log_dir: {problem}")
    work_dir = config.runtime.work_dir
    # SPEC §3: inside the work tree only where git ignores it (the agent could rewrite it).
    if log_dir.is_relative_to(work_dir) and vcs.is_work_tree(work_dir):
        try:
            vcs.run_git(work_dir, "check-ignore", "-q", "--no-index", str(log_dir))
        except GitError:
            return Found(
                False,
                f"runtime.log_dir: {log_dir} is inside the work tree and git does not ignore it",
            )
    return Found(True, str(log_dir))


def log_dir_problem(log_dir: Path) -> str | None:
    """Why serve could not create or write `log_dir`, found without creating anything."""
    existing = log_dir
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        verb = "write" if existing == log_dir else "create"
        return f"{existing} is not writable: serve cannot {verb} {log_dir}"
    return None


def _agent_confinement(config: Config) -> Found:
    mode = config.agent.confine
    decided = verdict(mode, landlock.abi_version())
    if decided.action == "refuse":
        return Found(
            False,
            f'agent.confine: "workdir" but {decided.reason}; '
            '"workdir-if-available" runs the agent unconfined there',
        )
    return Found(
        True, mode if decided.action == "confine" or mode == "off" else f"{mode}: unconfined"
    )


def _prompt_files(config: Config) -> Found:
    try:
        size = len(read_prompt(config))
    except ConfigError as exc:
        return Found(False, str(exc).removeprefix(f"{config.path}: "))
    return Found(True, f"{len(config.prompt.files)} file(s), {size} bytes")


def _notify(config: Config) -> Found:
    """`[notify]`: a command that can be started, for kinds of events that exist."""
    notify = config.notify
    if not notify.command:
        return Found(True, "off ([notify] command not set)")
    found = notify_program(config)
    if found.problem is not None:
        return Found(False, f"notify.command: {found.problem}")
    for i, kind in enumerate(notify.on):
        if kind == "notify_failed":
            return Found(
                False,
                f"notify.on[{i}]: notify_failed cannot be notified (a failing command would be "
                "asked to report its own failure)",
            )
        if kind not in REGISTRY and "." not in kind:  # "<plugin>.<kind>": known at admission
            hint = did_you_mean(kind, REGISTRY)
            return Found(False, f"notify.on[{i}]: {kind!r} is not an event kind{hint}")
    return Found(
        True, f"{notify.command[0]} -> {found.path}, on {', '.join(notify.on) or 'nothing'}"
    )


def notify_program(config: Config) -> Program:
    """Where `[notify] command` starts: on serve's PATH, or relative to the config's folder."""
    return find_program(
        config.notify.command[0],
        work_dir=config.path.parent,  # the command's cwd
        search_path=os.environ.get("PATH"),
        cwd_name="the config's folder",
    )


BOOT_CHECKS: tuple[BootCheck, ...] = (
    BootCheck("work tree", "create it or fix runtime.work_dir", _work_dir, True),
    BootCheck(
        "agent command",
        "install it, fix agent.command, or fix the script's #! line",
        _agent_command,
        True,
    ),
    BootCheck(
        "agent confinement",
        'use a kernel with Landlock, or agent.confine = "workdir-if-available"',
        _agent_confinement,
        True,
    ),
    BootCheck("agent parser", "set agent.parser to one of the builtin parsers", _parser, True),
    BootCheck("log_dir", "fix runtime.log_dir, or add it to .gitignore", _log_dir, False),
    BootCheck("prompt files", "create the file or edit prompt.files", _prompt_files, False),
    BootCheck("notify", "fix [notify] command or on", _notify, True),
)
# What an edited config must pass before a running serve applies it.
RELOAD_CHECKS = tuple(check for check in BOOT_CHECKS if check.on_reload)


def require_log_dir(config: Config) -> None:
    """ConfigError unless serve can create and write log_dir: before any event can be written."""
    problem = log_dir_problem(config.runtime.log_dir)
    if problem is not None:
        raise ConfigError(f"{config.path}: runtime.log_dir: {problem}")


def require(config: Config, checks: Iterable[BootCheck] = BOOT_CHECKS) -> None:
    """Raise ConfigError (exit 78), naming the file and key, at the first check that fails."""
    for check in checks:
        result = check.run(config)
        if result.status == "fail":
            raise ConfigError(f"{config.path}: {result.detail}")
