"""`peek` and `status` for people: a few aligned lines built from the same documents as --json."""

from __future__ import annotations

import time

from agent_runner.events import format_event
from agent_runner.observe.contracts import (
    ALIVE_STATES,
    Budget,
    Notify,
    PeekDocument,
    PluginEntry,
    Round,
    RoundSummary,
    StatusDocument,
    Supervisor,
)

SHOWN_ROUNDS = 3


def render_peek(doc: PeekDocument) -> str:
    """The snapshot in a dozen lines at most (plus the events asked for)."""
    lines = [f"project     {doc.project.work_dir} (parser {doc.project.parser})"]
    lines.append(f"supervisor  {_supervisor_line(doc.supervisor)}")
    if doc.round is not None:
        lines.append(f"round       {_round_line(doc.round, doc.project.idle_timeout_s)}")
    if doc.backoff is not None:
        b = doc.backoff
        said = f": {b.reason}" if b.reason else ""
        lines.append(
            f"back-off    {b.classification or 'transient'}, {duration(b.remaining_s)} left"
            f" ({b.source or 'estimated'}){said}"
        )
    if doc.deferred is not None:
        d = doc.deferred
        left = f", {duration(d.remaining_s)} left" if d.remaining_s is not None else ""
        lines.append(f"deferred    {d.action} by {d.hook}{left}: {d.reason}")
    for i, summary in enumerate(doc.last_rounds[:SHOWN_ROUNDS]):
        lines.append(f"{'last rounds' if i == 0 else '':<12}{_summary_line(summary)}")
    if not doc.last_rounds:
        lines.append("last rounds none yet")
    reaping = next((d for d in doc.defenses if d.name == "reaping"), None)
    if reaping is not None and reaping.value is not None:
        lines.append(f"reaping     {reaping.detail}")
    breakers = ", ".join(f"{name} {b.count}/{b.limit}" for name, b in doc.breakers.items())
    lines.append(f"breakers    {breakers}")
    lines.append(f"budget      {_budget_line(doc.budget)}")
    lines.append(f"notify      {_notify_line(doc.notify)}")
    sandbox = doc.plugins.sandbox
    lines.append(f"plugins     {_plugins_line(doc.plugins.entries)}")
    if sandbox is not None:
        lines.append(f"sandbox     tier {sandbox.tier} (Landlock ABI {sandbox.landlock_abi})")
    else:
        lines.append(f"sandbox     {doc.plugins.sandbox_reason}")
    lines.extend(format_event(event) for event in doc.events)
    return "\n".join(lines)


def render_status(doc: StatusDocument) -> str:
    """One line for serve (two with the systemd unit)."""
    text = _supervisor_line(doc.supervisor)
    if doc.round is not None:
        text += f"; round {_round_line(doc.round)}"
    text += f"\nlog_dir: {doc.project.log_dir}"
    unit = doc.systemd
    if unit is not None:
        text += f"\nsystemd: {unit.unit} ({unit.scope}): {unit.active}, {unit.enabled}"
    return text


def _supervisor_line(sup: Supervisor) -> str:
    alive = sup.state in ALIVE_STATES
    parts: list[str] = [sup.state if alive else f"not running ({sup.state})"]
    if sup.pid is not None:
        parts.append(f"pid {sup.pid}")
    if sup.uptime_s is not None:
        parts.append(f"up {duration(sup.uptime_s)}")
    if alive or sup.rounds_run:
        parts.append(f"{sup.rounds_run} round{'s' if sup.rounds_run != 1 else ''} run")
    if sup.pending_stop is not None:
        parts.append(f"stop pending ({sup.pending_stop.mode}, from {sup.pending_stop.source})")
    text = ", ".join(parts)
    return f"{text}: {sup.reason}" if sup.reason else text


def _round_line(current: Round, idle_timeout_s: float = 0) -> str:
    elapsed = "?" if current.elapsed_s is None else duration(current.elapsed_s)
    pid = f", agent pid {current.agent_pid}" if current.agent_pid is not None else ""
    quiet = ""
    if current.silent_s is not None:
        quiet = f", silent {duration(current.silent_s)}"
        quiet += f" (ended at {duration(idle_timeout_s)})" if idle_timeout_s else ""
    confined = ""
    if current.confined is not None:
        confined = (
            f", confined (Landlock ABI {current.landlock_abi})"
            if current.confined
            else ", unconfined"
        )
    return f"{current.n}: {elapsed} of {duration(current.budget_s)}{pid}{quiet}{confined}"


def _summary_line(summary: RoundSummary) -> str:
    ended = f"exit {summary.exit_code}" if summary.exit_code is not None else summary.signal
    notes = [
        note
        for note in (
            f"transient {summary.transient}" if summary.transient else None,
            "auth error" if summary.auth_error else None,
            "setup error" if summary.setup_error else None,
            _secured(summary),
        )
        if note
    ]
    tail = f", {', '.join(notes)}" if notes else ""
    return (
        f"{summary.round}: {summary.exit_cause} ({ended}) in {duration(summary.duration_s)}{tail}"
    )


def _secured(summary: RoundSummary) -> str | None:
    """What was done with the work left in the tree, and where it is kept."""
    action, ref = summary.tree_action, summary.tree_ref
    if action in (None, "none"):
        return None
    done = {"stash": "stashed", "commit": "committed", "failed": "stashed (tree not cleaned)"}
    if ref is None or action not in done:
        return action
    return f"work {done[action]} as {ref[:12]} (`agent-runner rescue`)"


def _budget_line(budget: Budget) -> str:
    day = budget.last_24h
    text = f"last 24 h: {day.rounds} rounds, {day.tokens} tokens, ${day.cost_usd:g} as reported"
    caps = {k: v for k, v in vars(budget.caps).items() if v is not None}
    text += "; caps " + ", ".join(f"{k} {v:g}" for k, v in caps.items()) if caps else "; no caps"
    waiting = budget.waiting
    if waiting is not None:
        until = time.strftime("%H:%M", time.localtime(waiting.until))
        text += (
            f"; waiting: {waiting.cap} {waiting.used:g}/{waiting.limit:g}"
            f" until {until} ({duration(waiting.remaining_s)} left)"
        )
    return text


def _notify_line(notify: Notify) -> str:
    if not notify.command:
        return "off ([notify] command not set)"
    text = (
        f"{notify.command[0]} on {', '.join(notify.on) or 'nothing'}: {notify.sent} sent,"
        f" {notify.failed} failed, {notify.rate_limited} rate-limited"
    )
    last = notify.last
    if last is not None and not last.ok:
        text += f" (last failure: {last.kind}: {last.reason})"
    return text


def _plugins_line(entries: list[PluginEntry]) -> str:
    """`2 admitted (a, b), 1 refused (c)` from the verdicts serve left in state.json."""
    if not entries:
        return "none admitted yet"
    groups: dict[str, list[str]] = {}
    for entry in entries:
        groups.setdefault(entry.state, []).append(entry.name)
    return ", ".join(
        f"{len(names)} {state} ({', '.join(names)})" for state, names in groups.items()
    )


def duration(seconds: float) -> str:
    """`42s`, `3m 5s`, `2h 10m`, `3d 4h`: two units at most."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.1f}s" if seconds < 10 and seconds != whole else f"{whole}s"
    for unit, size, small, small_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60)):
        if whole >= size:
            rest = (whole % size) // small_size
            return f"{whole // size}{unit}" + (f" {rest}{small}" if rest else "")
    rest = whole % 60
    return f"{whole // 60}m" + (f" {rest}s" if rest else "")
