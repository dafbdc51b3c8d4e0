"""Checks before the first round, and cleanup after a previous serve died uncleanly."""

from __future__ import annotations

import difflib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_runner import vcs
from agent_runner.config import Config, read_prompt
from agent_runner.errors import ConfigError, GitError
from agent_runner.events import REGISTRY, Emit
from agent_runner.parsers import PARSER_NAMES
from agent_runner.plugins import discovery
from agent_runner.plugins.admission import admit
from agent_runner.plugins.hooks import Hooks
from agent_runner.plugins.sandbox import Sandbox
from agent_runner.plugins.trust import running_package
from agent_runner.supervisor import landlock
from agent_runner.supervisor.agentpolicy import verdict
from agent_runner.supervisor.cgroup import RoundCgroups
from agent_runner.supervisor.instance import Holder
from agent_runner.supervisor.strays import MARKER_VARIABLES, Orphans, kill_orphans


def check_boot(config: Config) -> None:
    """Raise ConfigError (exit 78) for anything that would make every round fail."""
    check_runnable(config)
    check_log_dir(config)
    read_prompt(config)


def check_runnable(config: Config) -> None:
    """The checks a config must also pass to be applied by a live reload."""
    where = config.path
    if not config.runtime.work_dir.is_dir():
        raise ConfigError(
            f"{where}: runtime.work_dir: {config.runtime.work_dir} is not a directory"
        )
    if find_agent_program(config) is None:
        program = config.agent.command[0]
        raise ConfigError(f"{where}: agent.command: {program!r} is not an executable on PATH")
    if config.agent.confine == "workdir":
        decided = verdict(config.agent.confine, landlock.abi_version())
        if decided.action == "refuse":
            raise ConfigError(
                f'{where}: agent.confine: "workdir" but {decided.reason}; '
                '"workdir-if-available" runs the agent unconfined there'
            )
    if config.agent.parser not in PARSER_NAMES:
        raise ConfigError(
            f"{where}: agent.parser: unknown parser {config.agent.parser!r}; "
            f"builtin parsers: {', '.join(sorted(PARSER_NAMES))} (a plugin cannot be the parser "
            "in this version)"
        )
    check_notify(config)


def check_notify(config: Config) -> None:
    """`[notify]`: a command that can be started, and kinds of events that exist."""
    where, notify = config.path, config.notify
    if notify.command and find_notify_program(config) is None:
        raise ConfigError(
            f"{where}: notify.command: {notify.command[0]!r} is not an executable"
            + (" on PATH" if "/" not in notify.command[0] else "")
        )
    for i, kind in enumerate(notify.on):
        if kind == "notify_failed":
            raise ConfigError(
                f"{where}: notify.on[{i}]: notify_failed cannot be notified (a failing command"
                " would be asked to report its own failure)"
            )
        if kind not in REGISTRY and "." not in kind:  # "<plugin>.<kind>": known at admission
            close = difflib.get_close_matches(kind, list(REGISTRY), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: notify.on[{i}]: {kind!r} is not an event kind{hint}")


def find_notify_program(config: Config) -> str | None:
    """Where `[notify] command` starts; a relative path is the config folder's (its cwd)."""
    program = config.notify.command[0]
    if "/" in program:
        candidate = config.path.parent / program
        return str(candidate) if os.access(candidate, os.X_OK) and candidate.is_file() else None
    return shutil.which(program)


def check_log_dir(config: Config) -> None:
    """log_dir may sit inside the work tree only where git ignores it (SPEC §3)."""
    log_dir, work_dir = config.runtime.log_dir, config.runtime.work_dir
    if not log_dir.is_relative_to(work_dir) or not vcs.is_work_tree(work_dir):
        return
    try:
        vcs.run_git(work_dir, "check-ignore", "-q", "--no-index", str(log_dir))
    except GitError:
        raise ConfigError(
            f"{config.path}: runtime.log_dir: {log_dir} is inside the work tree and git does "
            "not ignore it (add it to .gitignore or move it)"
        ) from None


def find_agent_program(config: Config) -> str | None:
    """Where the agent's executable is, searched as the agent's spawn will search for it."""
    program = config.agent.command[0]
    if "/" in program:
        # A relative path is resolved by exec against the agent's cwd, the work tree.
        candidate = config.runtime.work_dir / program
        return str(candidate) if os.access(candidate, os.X_OK) and candidate.is_file() else None
    return shutil.which(program, path=config.agent.env.get("PATH", os.environ.get("PATH")))


def admit_plugins(
    config: Config, emit: Emit, heartbeat: Callable[[], None]
) -> tuple[dict[str, Any], Hooks]:
    """Probe the sandbox, admit every discovered plugin: (probe report, the hooks to call).

    ConfinementUnavailable under `require`. The hooks own the sandbox from here on and call
    `heartbeat` before each hook call.
    """
    sandbox = Sandbox(
        config.plugins.sandbox, emit=emit, hook_timeout_s=config.plugins.hook_timeout_s
    )
    try:
        report = sandbox.start().to_dict()
        candidates = discovery.installed(config.runtime.work_dir)
        admission = admit(candidates, config.plugins, sandbox, emit, package=running_package())
    except BaseException:
        sandbox.close()
        raise
    hooks = Hooks(
        admission,
        config.plugins,
        sandbox,
        emit,
        dirty_handler=config.vcs.dirty_handler,
        heartbeat=heartbeat,
    )
    return report, hooks


def reap_previous_serve(
    previous: dict[str, Any],
    emit: Emit,
    *,
    cgroups: RoundCgroups | None,
    key: str,
    log_dir: Path,
    previous_holder: Holder | None,
) -> None:
    """Kill whatever a serve that died uncleanly left running, before anything new starts.

    Its round cgroup and any other round cgroup left in ours go as units; then its agent's
    group and session, and every process carrying its environment marker, are found by scan.
    """
    agent = _table(previous, "round")
    supervisor = _table(previous, "supervisor")
    killed: set[int] = set()
    recorded = cgroups.recorded(agent.get("cgroup"), key) if cgroups is not None else None
    for cgroup in ([recorded] if recorded else []) + (cgroups.leftovers() if cgroups else []):
        killed.update(cgroup.kill())
        cgroup.remove()
    if previous_holder is not None or supervisor.get("phase") not in (None, "stopped"):
        since = supervisor.get("start_ticks")
        if type(since) is not int and previous_holder is not None:
            since = previous_holder.start_ticks
        pgid, ticks = agent.get("pgid"), agent.get("start_ticks")
        killed.update(
            kill_orphans(
                Orphans(
                    pgid=pgid if type(pgid) is int else None,
                    leader_start_ticks=ticks if type(ticks) is int else None,
                    markers=tuple(f"{name}={log_dir}".encode() for name in MARKER_VARIABLES),
                    since_ticks=since if type(since) is int else None,
                )
            )
        )
    if killed:
        emit(
            "round_orphan_reaped",
            round=agent.get("number"),
            pgid=agent.get("pgid"),
            pids=sorted(killed),
            cgroup=str(recorded.path) if recorded else None,
        )


def clear_git_leftovers(work_dir: Path, emit: Emit) -> None:
    """Remove what a git killed with the previous serve left in the repository."""
    try:
        repo = vcs.open_repo(work_dir)
    except GitError:
        return  # not a repository serve acts on: it never ran git there
    removed = vcs.clear_leftovers(repo)
    if removed:
        emit("git_leftovers_cleared", paths=[str(p) for p in removed[:20]])


def _table(state: dict[str, Any], name: str) -> dict[str, Any]:
    value = state.get(name)
    return value if isinstance(value, dict) else {}
