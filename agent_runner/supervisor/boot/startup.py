"""Boot: the sandbox probe, plugin admission, and cleanup after a serve died uncleanly.

The checks a config must pass before any of this are in `checks.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_runner import vcs
from agent_runner.config import Config
from agent_runner.errors import GitError
from agent_runner.events import Emit
from agent_runner.plugins.admission import discovery
from agent_runner.plugins.admission.trust import running_package
from agent_runner.plugins.admission.verdict import admit
from agent_runner.plugins.parent.hooks import Hooks
from agent_runner.plugins.parent.sandbox import Sandbox
from agent_runner.supervisor.agent.cgroup import RoundCgroups
from agent_runner.supervisor.agent.strays import MARKER_VARIABLES, Orphans, kill_orphans
from agent_runner.supervisor.boot.instance import Holder


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
