"""`peek` and `status`: a snapshot built from state.json, the lock and the event log's tail.

Read-only and fast: it reads one small JSON file and the last few events, never the whole
log, and never imports plugin code.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent_runner.config import Config
from agent_runner.errors import UsageError
from agent_runner.events import format_event, tail_events
from agent_runner.supervisor.budget import DAY_S, HOUR_S, Ledger
from agent_runner.supervisor.instance import read_holder
from agent_runner.supervisor.process import transcript_path
from agent_runner.supervisor.state import read_state


def snapshot(config: Config, *, events: int = 10, now: float | None = None) -> dict[str, Any]:
    """Everything an operator asks first, as plain JSON data."""
    now = time.time() if now is None else now
    log_dir = config.runtime.log_dir
    state = read_state(log_dir)
    holder = read_holder(log_dir)
    supervisor = state.get("supervisor") or {}
    running = holder is not None
    loop = state.get("loop") or {}
    until = loop.get("backoff_until")
    active_round = state.get("round") if running else None
    if isinstance(active_round, dict) and isinstance(active_round.get("started_at"), int | float):
        active_round = {**active_round, "elapsed_s": round(now - active_round["started_at"], 1)}
        number = active_round.get("number")
        if type(number) is int and number > 0:
            silent = _silent_s(transcript_path(log_dir, number), now)
            active_round["silent_s"] = None if silent is None else round(silent, 1)
    started = supervisor.get("started_at")
    return {
        "project": {
            "config": str(config.path),
            "work_dir": str(config.runtime.work_dir),
            "log_dir": str(log_dir),
            "agent": list(config.agent.command),
            "parser": config.agent.parser,
            "idle_timeout_s": config.runtime.idle_timeout_s,
        },
        "supervisor": {
            "running": running,
            "pid": holder.pid if holder else None,
            "phase": supervisor.get("phase") if running else _ended_phase(supervisor),
            "uptime_s": round(now - started, 1)
            if running and isinstance(started, int | float)
            else None,
            "version": supervisor.get("version"),
            # How a round's leftovers are killed: {"mode": "cgroup", "cgroup": base} or
            # {"mode": "fallback", "reason": why there is no cgroup}.
            "reaping": state.get("reaping") if running else None,
            "stop_pending": state.get("stop") if running else None,
        },
        "round": active_round,
        "deferred": _deferred(state, now) if running else None,
        "last_round": state.get("last_round"),
        "rounds_run": state.get("rounds_run", 0),
        "backoff": {
            "active": isinstance(until, int | float) and until > now,
            "until": until,
            "classification": loop.get("backoff_class"),
            "remaining_s": round(until - now, 1)
            if isinstance(until, int | float) and until > now
            else 0,
        },
        "breakers": {
            "crash_loop": {
                "count": loop.get("crash_streak", 0),
                "limit": config.breakers.crash_loop_rounds,
            },
            "stalled_no_progress": {
                "count": loop.get("stall_streak", 0),
                "limit": config.breakers.stalled_rounds,
            },
            "auth_failed": {
                "count": loop.get("auth_streak", 0),
                "limit": config.breakers.auth_failed_rounds,
            },
        },
        "budget": budget_report(config, state, running=running, now=now),
        "notify": _notify_report(config, state.get("notify")),
        "plugins": state.get("plugins", []),
        "sandbox": state.get("sandbox"),
        "events": tail_events(log_dir, events) if events else [],
    }


def budget_report(
    config: Config | None, state: dict[str, Any], *, running: bool, now: float
) -> dict[str, Any]:
    """The caps, what the rolling windows hold now, and the wait serve is in, if any."""
    ledger = Ledger.from_state(state.get("budget")) or Ledger()
    day, hour = ledger.totals(now, DAY_S), ledger.totals(now, HOUR_S)
    detail = state.get("phase_detail") or {}
    waiting = None
    phase = (state.get("supervisor") or {}).get("phase")
    if running and phase == "budget_wait" and isinstance(detail.get("until"), int | float):
        waiting = {
            "cap": detail.get("cap"),
            "used": detail.get("used"),
            "limit": detail.get("limit"),
            "until": detail["until"],
            "remaining_s": round(max(0.0, detail["until"] - now), 1),
        }
    return {
        "caps": None if config is None else asdict(config.budget),
        "last_24h": {"rounds": day.rounds, "tokens": day.tokens, "cost_usd": day.cost_usd},
        "last_hour": {"rounds": hour.rounds},
        "waiting": waiting,
    }


def _notify_report(config: Config, kept: Any) -> dict[str, Any]:
    """The configured command and kinds; how serve's runs of it went (state.json)."""
    kept = kept if isinstance(kept, dict) else {}
    counts = {k: kept.get(k) if type(kept.get(k)) is int else 0 for k in _NOTIFY_COUNTS}
    last = kept.get("last")
    return {
        "command": list(config.notify.command),
        "on": list(config.notify.on),
        **counts,
        "last": last if isinstance(last, dict) else None,
    }


_NOTIFY_COUNTS = ("sent", "failed", "rate_limited")


def _silent_s(transcript: Path, now: float) -> float | None:
    """Seconds since the relay last wrote the transcript (its mtime); None when not there."""
    try:
        info = os.stat(transcript, follow_symlinks=False)
    except OSError:
        return None
    return max(0.0, now - info.st_mtime)


def _ended_phase(supervisor: dict[str, Any]) -> str:
    # A serve that died of an internal error says so; any other ended serve is "stopped".
    return "crashed" if supervisor.get("phase") == "crashed" else "stopped"


def _deferred(state: dict[str, Any], now: float) -> dict[str, Any] | None:
    """While spawn hooks hold the next round back: which hook, why, and until when."""
    detail = state.get("phase_detail")
    if (state.get("supervisor") or {}).get("phase") != "deferred" or not isinstance(detail, dict):
        return None
    until = detail.get("until")
    remaining = round(max(0.0, until - now), 1) if isinstance(until, int | float) else None
    return {
        "action": detail.get("action"),
        "hook": detail.get("hook"),
        "reason": detail.get("reason"),
        "until": until,
        "remaining_s": remaining,
    }


def select_path(snap: dict[str, Any], path: str) -> Any:
    """The value at a dotted path such as `backoff.until`."""
    value: Any = snap
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise UsageError(f"--select {path}: no {part!r} here")
    return value


def render_peek(snap: dict[str, Any]) -> str:
    """The snapshot as a few human-readable lines."""
    sup, last, backoff = snap["supervisor"], snap["last_round"], snap["backoff"]
    lines = [f"project     {snap['project']['work_dir']}"]
    if sup["running"]:
        lines.append(
            f"supervisor  running (pid {sup['pid']}, up {sup['uptime_s']}s, {sup['phase']})"
        )
    else:
        ended = " (its last run crashed)" if sup["phase"] == "crashed" else ""
        lines.append(f"supervisor  not running{ended}")
    if sup.get("stop_pending"):
        pending = sup["stop_pending"]
        lines.append(f"stop        pending ({pending['mode']}, from {pending['source']})")
    if sup.get("reaping"):
        lines.append(f"reaping     {describe_reaping(sup['reaping'])}")
    if snap["round"]:
        current = snap["round"]
        silent = current.get("silent_s")
        idle = snap["project"]["idle_timeout_s"]
        quiet = "" if silent is None else f", silent {silent}s"
        quiet += f" (ended at {idle:g}s)" if silent is not None and idle else ""
        elapsed = current.get("elapsed_s")
        lines.append(
            f"round       {current['number']} running for {elapsed}s{quiet}" + _confinement(current)
        )
    if last:
        lines.append(
            f"last round  {last['round']}: {last['exit_cause']} (exit {last['exit_code']}) "
            f"in {last['duration_s']}s"
            + (f", transient {last['transient']}" if last.get("transient") else "")
            + _secured_note(last)
        )
    deferred = snap["deferred"]
    if deferred:
        lines.append(
            f"deferred    {deferred['action']} by {deferred['hook']}, "
            f"{deferred['remaining_s']}s left: {deferred['reason']}"
        )
    lines.append(f"rounds run  {snap['rounds_run']}")
    if backoff["active"]:
        lines.append(f"back-off    {backoff['classification']}, {backoff['remaining_s']}s left")
    lines.append(f"budget      {_budget_line(snap['budget'])}")
    lines.append(f"notify      {_notify_line(snap['notify'])}")
    breakers = ", ".join(
        f"{name} {b['count']}/{b['limit']}" for name, b in snap["breakers"].items()
    )
    lines.append(f"breakers    {breakers}")
    lines.append(f"plugins     {_plugins_line(snap['plugins'])}")
    sandbox = snap["sandbox"]
    if sandbox:
        lines.append(f"sandbox     tier {sandbox['tier']} (Landlock ABI {sandbox['landlock_abi']})")
    else:
        lines.append("sandbox     not probed yet")
    lines.extend(format_event(event) for event in snap["events"])
    return "\n".join(lines)


def _secured_note(last: dict[str, Any]) -> str:
    ref, action = last.get("tree_ref"), last.get("tree_action")
    if not isinstance(ref, str) or action not in ("stash", "commit", "failed"):
        return ""
    done = {"stash": "stashed", "commit": "committed", "failed": "stashed (tree not cleaned)"}
    return f", work {done[action]} as {ref[:12]} (`agent-runner rescue`)"


def _notify_line(report: dict[str, Any]) -> str:
    if not report["command"]:
        return "off ([notify] command not set)"
    text = (
        f"{report['command'][0]} on {', '.join(report['on']) or 'nothing'}: {report['sent']} sent,"
        f" {report['failed']} failed, {report['rate_limited']} rate-limited"
    )
    last = report["last"]
    if last and not last.get("ok"):
        text += f" (last failure: {last.get('about') or last.get('kind')}: {last.get('reason')})"
    return text


def _budget_line(report: dict[str, Any]) -> str:
    day = report["last_24h"]
    text = (
        f"last 24 h: {day['rounds']} rounds, {day['tokens']} tokens, "
        f"${day['cost_usd']:g} as reported"
    )
    caps = {k: v for k, v in (report["caps"] or {}).items() if v is not None}
    text += "; caps " + ", ".join(f"{k} {v:g}" for k, v in caps.items()) if caps else "; no caps"
    waiting = report["waiting"]
    if waiting:
        until = time.strftime("%H:%M", time.localtime(waiting["until"]))
        text += (
            f"; waiting: {waiting['cap']} {waiting['used']:g}/{waiting['limit']:g}"
            f" until {until} ({waiting['remaining_s']:g}s)"
        )
    return text


def _confinement(current: dict[str, Any]) -> str:
    """`, confined (Landlock ABI 7)` or `, unconfined`; nothing from a serve that predates it."""
    if "confined" not in current:
        return ""
    if current["confined"]:
        return f", confined (Landlock ABI {current.get('landlock_abi')})"
    return ", unconfined"


def _plugins_line(verdicts: Any) -> str:
    """`2 admitted (a, b), 1 refused (c)` from the verdicts serve left in state.json."""
    if not isinstance(verdicts, list) or not verdicts:
        return "not admitted yet"
    groups: dict[str, list[str]] = {}
    for verdict in verdicts:
        if isinstance(verdict, dict):
            groups.setdefault(str(verdict.get("state")), []).append(str(verdict.get("name")))
    return ", ".join(f"{len(names)} {kind} ({', '.join(names)})" for kind, names in groups.items())


def status_report(config: Config, *, now: float | None = None) -> dict[str, Any]:
    """Is serve running: pid, uptime, current round."""
    snap = snapshot(config, events=0, now=now)
    current = snap["round"]
    return {
        "running": snap["supervisor"]["running"],
        "pid": snap["supervisor"]["pid"],
        "uptime_s": snap["supervisor"]["uptime_s"],
        "phase": snap["supervisor"]["phase"],
        "round": current["number"] if current else None,
        "log_dir": snap["project"]["log_dir"],
        "stop_pending": snap["supervisor"]["stop_pending"],
    }


def render_status(report: dict[str, Any]) -> str:
    if not report["running"]:
        text = f"not running (log_dir {report['log_dir']})"
    else:
        text = f"running: pid {report['pid']}, up {report['uptime_s']}s, {report['phase']}"
        text += f", round {report['round']}" if report["round"] else ""
        if report.get("stop_pending"):
            text += f", stop pending ({report['stop_pending']['mode']})"
    unit = report.get("systemd")
    if unit:
        text += f"\nsystemd: {unit['unit']} ({unit['scope']}): {unit['active']}, {unit['enabled']}"
    return text


def describe_reaping(reaping: dict[str, Any]) -> str:
    """One line for how serve kills what a round leaves: its cgroup, or the fallback and why."""
    if reaping.get("mode") == "cgroup":
        return f"a cgroup per round under {reaping.get('cgroup')}"
    return f"subreaper and process scans (no cgroup: {reaping.get('reason')})"
