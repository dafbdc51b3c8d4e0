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
from agent_runner.supervisor.budget import Ledger
from agent_runner.supervisor.instance import PID_FILE, read_holder
from agent_runner.supervisor.state import STATE_NAME, load_state
from agent_runner.systemd.state import installed_instances

MAX_PROJECTS = 10_000  # folders looked at under the state home


@dataclass
class _Found:
    log_dir: Path
    units: list[dict[str, str]] = field(default_factory=list)
    config_problem: str | None = None


def host_report(*, now: float | None = None) -> dict[str, Any]:
    """Every project with state on this host, and every installed unit's project."""
    now = time.time() if now is None else now
    home = state_home() / "agent-runner"
    found: dict[str, _Found] = {}
    for log_dir in _state_folders(home):
        found.setdefault(str(log_dir), _Found(log_dir))
    for unit, scope, project in installed_instances():
        log_dir, problem = _unit_log_dir(Path(project))
        entry = found.setdefault(str(log_dir), _Found(log_dir))
        entry.units.append({"unit": unit, "scope": scope, "project_dir": project})
        entry.config_problem = entry.config_problem or problem
    midnight = _local_midnight(now)
    projects = [_project(entry, now, midnight) for entry in found.values()]
    projects.sort(key=lambda p: (not p["running"], p["name"]))
    return {"state_home": str(home), "projects": projects}


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


def _project(found: _Found, now: float, midnight: float) -> dict[str, Any]:
    log_dir = found.log_dir
    state, problem = load_state(log_dir)
    holder = read_holder(log_dir)
    running = holder is not None
    supervisor = _dict(state.get("supervisor"))
    loop = _dict(state.get("loop"))
    last = _dict(state.get("last_round"))
    current = _dict(state.get("round")) if running else {}
    until = loop.get("backoff_until")
    backing_off = isinstance(until, int | float) and until > now
    today = (Ledger.from_state(state.get("budget")) or Ledger()).since(midnight)
    project = _dict(state.get("project"))
    work_dir = project.get("work_dir") or (found.units[0]["project_dir"] if found.units else None)
    return {
        "name": log_dir.name,
        "log_dir": str(log_dir),
        "work_dir": work_dir,
        "running": running,
        "pid": holder.pid if holder else None,
        "phase": supervisor.get("phase") if running else _ended(supervisor),
        "round": current.get("number"),
        "backoff": {
            "active": backing_off,
            "until": until if backing_off else None,
            "classification": loop.get("backoff_class") if backing_off else None,
        },
        "last_exit": {k: last.get(k) for k in ("round", "exit_cause", "exit_code")}
        if last
        else None,
        "today": {"rounds": today.rounds, "tokens": today.tokens, "cost_usd": today.cost_usd},
        "units": found.units,
        "problem": _problem(problem, found.config_problem),
    }


def _problem(state_problem: str | None, config_problem: str | None) -> str | None:
    if state_problem is not None:
        return f"state.json: {state_problem}"
    return config_problem


def _ended(supervisor: dict[str, Any]) -> str | None:
    if not supervisor:
        return None
    return "crashed" if supervisor.get("phase") == "crashed" else "stopped"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _local_midnight(now: float) -> float:
    day = time.localtime(now)
    return time.mktime((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0, 0, 0, -1))


def render_host(report: dict[str, Any]) -> str:
    """One line per project, running ones first."""
    projects = report["projects"]
    if not projects:
        return f"no projects with state under {report['state_home']}"
    lines = []
    for p in projects:
        if p["running"]:
            state = f"running (pid {p['pid']}, {p['phase']})"
            state += f", round {p['round']}" if p["round"] else ""
        else:
            state = "not running" + (f" ({p['phase']})" if p["phase"] else "")
        last = p["last_exit"]
        if last:
            state += f"; last exit: round {last['round']} {last['exit_cause']}"
        backoff = p["backoff"]
        if backoff["active"]:
            clock = time.strftime("%H:%M", time.localtime(backoff["until"]))
            state += f"; back-off until {clock} ({backoff['classification']})"
        today = p["today"]
        state += f"; today {today['rounds']} rounds, ${today['cost_usd']:g} reported"
        where = p["work_dir"] or p["log_dir"]
        units = ", ".join(u["unit"] for u in p["units"])
        lines.append(f"{p['name']}  {where}" + (f"  [{units}]" if units else ""))
        lines.append(f"    {state}")
        if p["problem"]:
            lines.append(f"    problem: {p['problem']}")
    return "\n".join(lines)
