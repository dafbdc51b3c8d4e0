"""`status --all`: every project on this host, read from state files only.

A project is a folder under the state home holding what serve writes (state.json, serve.pid),
or the log_dir of a unit `install` set up. Nothing is asked of a running serve or of systemd;
every file is read through the same refusing readers serve uses (no FIFO, symlink or device
is ever opened, sizes capped), so one damaged project costs its own line, not the listing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_runner.config import default_log_dir, load_config, state_home
from agent_runner.errors import AgentRunnerError
from agent_runner.observe.contracts import (
    ALIVE_STATES,
    HostDocument,
    HostProject,
    HostUnit,
    RoundSummary,
    Spent,
    from_json,
)
from agent_runner.observe.peek import Recorded, backoff_block, supervisor_block
from agent_runner.supervisor.boot.instance import PID_FILE
from agent_runner.supervisor.loop.budget import Ledger
from agent_runner.supervisor.loop.state import STATE_NAME, recent_summaries
from agent_runner.systemd.state import installed_instances

MAX_PROJECTS = 10_000  # folders looked at under the state home


@dataclass
class _Found:
    log_dir: Path
    units: list[HostUnit] = field(default_factory=list)
    config_problem: str | None = None


def host_report(*, now: float | None = None) -> HostDocument:
    """Every project with state on this host, and every installed unit's project."""
    now = time.time() if now is None else now
    home = state_home() / "agent-runner"
    found: dict[str, _Found] = {}
    for log_dir in _state_folders(home):
        found.setdefault(str(log_dir), _Found(log_dir))
    for unit, scope, project in installed_instances():
        log_dir, problem = _unit_log_dir(Path(project))
        entry = found.setdefault(str(log_dir), _Found(log_dir))
        entry.units.append(HostUnit(unit=unit, scope=scope, project_dir=project))
        entry.config_problem = entry.config_problem or problem
    midnight = _local_midnight(now)
    projects = [_project(entry, now, midnight) for entry in found.values()]
    projects.sort(key=lambda p: (p.supervisor.state not in ALIVE_STATES, p.name))
    return HostDocument(state_home=str(home), projects=projects)


def _state_folders(home: Path) -> list[Path]:
    try:
        entries = list(os.scandir(home))[:MAX_PROJECTS]
    except OSError:
        return []
    folders = []
    for entry in entries:
        # A symlinked folder is left out: it is not where serve put its state.
        if not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if _holds_state(path):
            folders.append(path)
    return folders


def _holds_state(folder: Path) -> bool:
    for name in (STATE_NAME, PID_FILE):
        try:
            os.lstat(folder / name)
        except PermissionError:
            return True  # another account's: listed, with why it cannot be read
        except OSError:
            continue
        return True
    return False


def _unit_log_dir(project: Path) -> tuple[Path, str | None]:
    """The log_dir the unit's serve uses: its config's, or the default for the folder."""
    try:
        return load_config(project / "agent-runner.toml").runtime.log_dir, None
    except AgentRunnerError as exc:
        return default_log_dir(project), str(exc)


def _project(found: _Found, now: float, midnight: float) -> HostProject:
    log_dir = found.log_dir
    recorded = Recorded(log_dir, now)
    state = recorded.state
    current = state.get("round") if recorded.current else None
    number = current.get("number") if isinstance(current, dict) else None
    today = (Ledger.from_state(state.get("budget")) or Ledger()).since(midnight)
    summaries = recent_summaries(state)
    work_dir = _dict(state.get("project")).get("work_dir")
    if not isinstance(work_dir, str):
        work_dir = found.units[0].project_dir if found.units else None
    return HostProject(
        name=log_dir.name,
        log_dir=str(log_dir),
        work_dir=work_dir,
        supervisor=supervisor_block(recorded),
        round=number if type(number) is int else None,
        backoff=backoff_block(recorded),
        last_round=from_json(RoundSummary, summaries[0]) if summaries else None,
        today=Spent(rounds=today.rounds, tokens=today.tokens, cost_usd=today.cost_usd),
        units=found.units,
        problem=_problem(recorded.damage, found.config_problem),
    )


def _problem(state_problem: str | None, config_problem: str | None) -> str | None:
    if state_problem is not None:
        return f"state.json: {state_problem}"
    return config_problem


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _local_midnight(now: float) -> float:
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))


def render_host(report: HostDocument) -> str:
    """Two lines per project, running ones first."""
    if not report.projects:
        return f"no projects with state under {report.state_home}"
    lines = []
    for p in report.projects:
        sup = p.supervisor
        if sup.state in ALIVE_STATES:
            text = f"{sup.state} (pid {sup.pid})" + (f", round {p.round}" if p.round else "")
        else:
            text = f"not running ({sup.state})"
        last = p.last_round
        if last is not None:
            text += f"; last exit: round {last.round} {last.exit_cause}"
        if p.backoff is not None:
            clock = time.strftime("%H:%M", time.localtime(p.backoff.until))
            text += f"; back-off until {clock} ({p.backoff.classification})"
        text += f"; today {p.today.rounds} rounds, ${p.today.cost_usd:g} reported"
        units = ", ".join(u.unit for u in p.units)
        lines.append(f"{p.name}  {p.work_dir or p.log_dir}" + (f"  [{units}]" if units else ""))
        lines.append(f"    {text}")
        if p.problem:
            lines.append(f"    problem: {p.problem}")
    return "\n".join(lines)
