"""`peek` and `status`: the project's state from state.json, the lock and the event log's tail.

Read-only and fast: one small JSON file and the last few events, never the whole log, and no
plugin code. Whatever state.json holds, the documents conform to their schemas.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from agent_runner.config import Config
from agent_runner.errors import UsageError
from agent_runner.events import redact_argv, tail_events
from agent_runner.observe.contracts import (
    Backoff,
    Breaker,
    Budget,
    BudgetWaiting,
    Defense,
    Deferral,
    Notify,
    NotifyRun,
    PeekDocument,
    PendingStop,
    PluginEntry,
    Plugins,
    Project,
    Round,
    RoundsSpent,
    RoundSummary,
    SandboxReport,
    SpendCaps,
    Spent,
    StatusDocument,
    Supervisor,
    SupervisorState,
    Unit,
    from_json,
)
from agent_runner.supervisor.agent.strays import process_start_ticks
from agent_runner.supervisor.boot.instance import read_holder
from agent_runner.supervisor.loop.budget import DAY_S, HOUR_S, Ledger
from agent_runner.supervisor.loop.policy import LoopState, breaker_streaks
from agent_runner.supervisor.loop.state import load_state, loop_from_state, recent_summaries

# serve's phases (state.json) as the states peek reports while serve runs; any other is waiting.
_PHASE_STATES: dict[str, SupervisorState] = {
    "running": "running",
    "backoff": "backoff",
    "deferred": "deferred",
    "stopping": "stopping",
}
_WAITING_FOR = {
    "starting": "starting up",
    "restart_delay": "the restart delay",
    "waiting_for_prompt": "a prompt file that is missing or empty",
    "budget_wait": "a spend cap (see budget.waiting)",
    "between_rounds": "the next round",
}


LAST_ROUNDS = 10


class Recorded:
    """A log_dir's state.json and serve.pid as read once: what the supervisor block needs."""

    def __init__(self, log_dir: Path, now: float) -> None:
        self.now = now
        self.state, self.damage = load_state(log_dir)
        self.holder = read_holder(log_dir)
        supervisor = self.state.get("supervisor")
        self.recorded: dict[str, Any] = supervisor if isinstance(supervisor, dict) else {}
        phase = self.recorded.get("phase")
        self.phase = phase if isinstance(phase, str) else None
        # The state file is this serve's only once it has written it (boot, first transition).
        self.current = self.holder is not None and self.recorded.get("pid") == self.holder.pid
        self.loop = loop_from_state(self.state.get("loop"), clean_exit=False, latest=math.inf)

    def detail(self) -> dict[str, Any]:
        value = self.state.get("phase_detail")
        return value if isinstance(value, dict) else {}


class View(Recorded):
    """A project's recorded state with its config: what every block of peek is built from."""

    def __init__(self, config: Config, now: float) -> None:
        super().__init__(config.runtime.log_dir, now)
        self.config = config


def snapshot(config: Config, *, events: int = 10, now: float | None = None) -> PeekDocument:
    """Everything an operator asks first."""
    view = View(config, time.time() if now is None else now)
    return PeekDocument(
        project=project_block(config),
        supervisor=supervisor_block(view),
        round=round_block(view),
        last_rounds=[
            summary
            for summary in (from_json(RoundSummary, raw) for raw in recent_summaries(view.state))
            if summary is not None
        ][:LAST_ROUNDS],
        backoff=backoff_block(view),
        deferred=deferral_block(view),
        breakers={
            name: Breaker(count=count, limit=limit)
            for name, (count, limit) in breaker_streaks(view.loop, config.breakers).items()
        },
        budget=budget_block(config, view.state, running=view.current, now=view.now),
        notify=notify_block(config, view.state.get("notify")),
        plugins=plugins_block(view),
        defenses=defenses(view),
        events=tail_events(config.runtime.log_dir, events) if events else [],
    )


def status_document(
    config: Config, unit: dict[str, Any] | None, *, now: float | None = None
) -> StatusDocument:
    """Is serve running: the supervisor block, its round and the systemd unit."""
    view = View(config, time.time() if now is None else now)
    return StatusDocument(
        project=project_block(config),
        supervisor=supervisor_block(view),
        round=round_block(view),
        systemd=None if unit is None else from_json(Unit, unit),
    )


def project_block(config: Config) -> Project:
    return Project(
        config=str(config.path),
        work_dir=str(config.runtime.work_dir),
        log_dir=str(config.runtime.log_dir),
        agent=redact_argv(list(config.agent.command)),
        parser=config.agent.parser,
        idle_timeout_s=config.runtime.idle_timeout_s,
    )


def supervisor_block(view: Recorded) -> Supervisor:
    recorded = view.recorded
    # A serve that has not written state.json yet must not be shown with the last one's start.
    known = view.current or view.holder is None
    started = _number(recorded.get("started_at")) if known else None
    version = recorded.get("version")
    rounds = view.state.get("rounds_run")
    state, reason = supervisor_state(view)
    pid = view.holder.pid if view.holder is not None else _int(recorded.get("pid"))
    return Supervisor(
        state=state,
        pid=pid if state not in ("stopped", "crashed") else None,
        started_at=started,
        uptime_s=round(view.now - started, 1) if view.current and started is not None else None,
        version=version if isinstance(version, str) else None,
        rounds_run=rounds if type(rounds) is int and rounds >= 0 else 0,
        pending_stop=from_json(PendingStop, view.state.get("stop")) if view.current else None,
        reason=reason,
    )


def supervisor_state(view: Recorded) -> tuple[SupervisorState, str | None]:  # noqa: PLR0911
    """One state, and why: from the live process first, then from what state.json says."""
    reason = view.detail().get("reason")
    reason = reason if isinstance(reason, str) else None
    if view.holder is not None:
        if view.damage is not None:
            return "waiting", f"state.json is damaged ({view.damage}); serve rewrites it soon"
        if not view.current:
            return "waiting", "starting up"
        if view.state.get("stop") is not None:
            return "stopping", None
        state = _PHASE_STATES.get(view.phase or "", "waiting")
        if state == "waiting":
            return state, f"waiting for {_WAITING_FOR.get(view.phase or '', 'the next round')}"
        return state, reason if state == "deferred" else None
    if view.damage is not None:
        return "stopped", f"state.json is damaged ({view.damage}); serve starts afresh"
    if view.phase == "crashed":
        return "crashed", reason
    if view.phase in (None, "stopped"):
        return "stopped", reason
    pid, ticks = _int(view.recorded.get("pid")), view.recorded.get("start_ticks")
    seen = None if pid is None else process_start_ticks(pid)
    if seen is None:
        gone = f"pid {pid} is gone" if pid is not None else "it names no pid"
    else:
        gone = f"pid {pid} is another process now" if seen != ticks else f"pid {pid} lost its lock"
    return "stale", f"state.json says {view.phase}, but {gone} (killed, or the host rebooted)"


def select_path(document: dict[str, Any], path: str) -> Any:
    """The value at a dotted path such as `backoff.until`; UsageError names the first miss."""
    value: Any = document
    parts = path.split(".")
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "the document"
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict):
            keys = ", ".join(value) or "none"
            raise UsageError(f"--select {path}: {where} has no key {part!r} (keys: {keys})")
        elif isinstance(value, list):
            raise UsageError(f"--select {path}: {where} has no item {part!r} ({len(value)} items)")
        else:
            shown = json.dumps(value)[:40]
            raise UsageError(f"--select {path}: {where} is {shown}, which has no key {part!r}")
    return value


def round_block(view: View) -> Round | None:
    current = view.state.get("round")
    if not view.current or view.phase != "running" or not isinstance(current, dict):
        return None
    number = _int(current.get("number"))
    if number is None:
        return None
    started = _number(current.get("started_at"))
    budget = _number(current.get("budget_s"))
    cgroup = current.get("cgroup")
    confined = current.get("confined")
    # Only a running round needs serve's process module and all that it imports.
    from agent_runner.supervisor.agent.process import transcript_path  # noqa: PLC0415

    return Round(
        n=number,
        started_at=started,
        elapsed_s=None if started is None else round(max(0.0, view.now - started), 1),
        budget_s=view.config.runtime.round_budget_s if budget is None else budget,
        agent_pid=_int(current.get("pid")),
        cgroup=cgroup if isinstance(cgroup, str) else None,
        silent_s=_silent_s(transcript_path(view.config.runtime.log_dir, number), view.now)
        if number > 0
        else None,
        confined=confined if isinstance(confined, bool) else None,
        landlock_abi=_int(current.get("landlock_abi")),
    )


def backoff_block(view: Recorded) -> Backoff | None:
    loop: LoopState = view.loop
    until = loop.backoff_until
    if until is None or until <= view.now:
        return None
    reason = view.state.get("backoff_reason")
    return Backoff(
        until=until,
        remaining_s=round(until - view.now, 1),
        classification=loop.backoff_class,
        reason=reason if isinstance(reason, str) else None,
        source=loop.backoff_source,
    )


def deferral_block(view: View) -> Deferral | None:
    """While spawn hooks hold the next round back: which hook, why, and until when."""
    detail = view.detail()
    if not view.current or view.phase != "deferred":
        return None
    until = _number(detail.get("until"))
    texts = [detail.get(key) for key in ("action", "hook", "reason")]
    if not all(isinstance(text, str) for text in texts):
        return None
    action, hook, reason = (str(text) for text in texts)
    return Deferral(
        action=action,
        hook=hook,
        reason=reason,
        until=until,
        remaining_s=None if until is None else round(max(0.0, until - view.now), 1),
    )


def budget_block(config: Config, state: dict[str, Any], *, running: bool, now: float) -> Budget:
    """The caps, what the rolling windows hold now, and the wait serve is in, if any."""
    ledger = Ledger.from_state(state.get("budget")) or Ledger()
    day, hour = ledger.totals(now, DAY_S), ledger.totals(now, HOUR_S)
    supervisor = state.get("supervisor")
    phase = supervisor.get("phase") if isinstance(supervisor, dict) else None
    detail = state.get("phase_detail")
    waiting = None
    if running and phase == "budget_wait" and isinstance(detail, dict):
        until = _number(detail.get("until"))
        used, limit, cap = (
            _number(detail.get("used")),
            _number(detail.get("limit")),
            detail.get("cap"),
        )
        if until is not None and used is not None and limit is not None and isinstance(cap, str):
            waiting = BudgetWaiting(
                cap=cap,
                used=used,
                limit=limit,
                until=until,
                remaining_s=round(max(0.0, until - now), 1),
            )
    caps = config.budget
    return Budget(
        caps=SpendCaps(
            max_cost_usd_per_day=caps.max_cost_usd_per_day,
            max_tokens_per_day=caps.max_tokens_per_day,
            max_rounds_per_hour=caps.max_rounds_per_hour,
        ),
        last_24h=Spent(rounds=day.rounds, tokens=day.tokens, cost_usd=day.cost_usd),
        last_hour=RoundsSpent(rounds=hour.rounds),
        waiting=waiting,
    )


def notify_block(config: Config, kept: Any) -> Notify:
    """The configured command and kinds; how the last serve's runs of it went (state.json)."""
    kept = kept if isinstance(kept, dict) else {}
    counts = {k: kept.get(k) if type(kept.get(k)) is int else 0 for k in _NOTIFY_COUNTS}
    return Notify(
        command=list(config.notify.command),
        on=list(config.notify.on),
        sent=counts["sent"],
        failed=counts["failed"],
        rate_limited=counts["rate_limited"],
        last=from_json(NotifyRun, kept.get("last")),
    )


_NOTIFY_COUNTS = ("sent", "failed", "rate_limited")


def _silent_s(transcript: Path, now: float) -> float | None:
    """Seconds since the relay last wrote the transcript (its mtime); None when not there."""
    try:
        info = os.stat(transcript, follow_symlinks=False)
    except OSError:
        return None
    return round(max(0.0, now - info.st_mtime), 1)


def plugins_block(view: View) -> Plugins:
    sandbox = from_json(SandboxReport, view.state.get("sandbox"))
    rows = view.state.get("plugins")
    entries = [from_json(PluginEntry, row) for row in rows] if isinstance(rows, list) else []
    if sandbox is not None:
        reason = None
    elif not view.state:
        reason = "no serve has run here yet (`agent-runner doctor` probes the sandbox now)"
    else:
        reason = "the last serve stopped before it probed the sandbox"
    return Plugins(
        sandbox=sandbox,
        sandbox_reason=reason,
        entries=[entry for entry in entries if entry is not None],
    )


def defenses(view: View) -> list[Defense]:
    """Each guard between an unattended agent and harm, its value, and whether it is on."""
    config = view.config
    runtime, breakers = config.runtime, config.breakers
    sandbox = from_json(SandboxReport, view.state.get("sandbox"))
    tier = sandbox.tier if sandbox is not None else None
    reaping = view.state.get("reaping")
    reaping = reaping if isinstance(reaping, dict) else {}
    mode = reaping.get("mode") if reaping.get("mode") in ("cgroup", "fallback") else None
    return [
        Defense(
            name="round_budget_s",
            value=runtime.round_budget_s,
            active=True,
            detail="a round older than this is killed with its whole process group",
        ),
        Defense(
            name="sigterm_grace_s",
            value=config.agent.sigterm_grace_s,
            active=True,
            detail="SIGTERM to the agent's group, then SIGKILL after this",
        ),
        Defense(
            name="reaping",
            value=mode,
            active=True,
            detail=describe_reaping(reaping)
            if mode is not None
            else "known once serve runs: a cgroup per round where the host gives one, else "
            "the subreaper and process scans",
        ),
        *(
            Defense(
                name=f"breaker.{name}",
                value=limit,
                active=True,
                detail=f"give up (exit 69) after {limit} in a row",
            )
            for name, (_count, limit) in breaker_streaks(view.loop, breakers).items()
        ),
        Defense(
            name="idle_timeout_s",
            value=runtime.idle_timeout_s,
            active=runtime.idle_timeout_s > 0,
            detail="a round whose transcript stays silent this long is ended"
            if runtime.idle_timeout_s > 0
            else "off: a silent round runs until its budget",
        ),
        *(
            Defense(
                name=f"budget.{name}",
                value=limit,
                active=limit is not None,
                detail=f"serve waits (never gives up) once the {window} reaches it"
                if limit is not None
                else "no cap",
            )
            for name, limit, window in (
                ("max_cost_usd_per_day", config.budget.max_cost_usd_per_day, "last 24 h's cost"),
                ("max_tokens_per_day", config.budget.max_tokens_per_day, "last 24 h's tokens"),
                ("max_rounds_per_hour", config.budget.max_rounds_per_hour, "last hour's rounds"),
            )
        ),
        Defense(
            name="backoff_max_wait_s",
            value=config.backoff.max_wait_s,
            active=True,
            detail="no back-off waits longer, whatever the provider says",
        ),
        Defense(
            name="confinement",
            value=tier,
            active=tier not in (None, "none") and config.plugins.sandbox != "off",
            detail=f'plugins.sandbox = "{config.plugins.sandbox}"; '
            + (f"the last probe achieved tier {tier}" if tier else "not probed yet"),
        ),
        Defense(
            name="hardened_git",
            value=True,
            active=True,
            detail="every git call runs with no hooks, fsmonitor, pager, editor, credential "
            "helper or system config, whatever the repository's config says",
        ),
        Defense(
            name="dirty_action",
            value=config.vcs.dirty_action,
            active=config.vcs.dirty_action != "ignore",
            detail="work left in the tree after a round is "
            + {"stash": "stashed", "commit": "committed", "ignore": "left as it is"}.get(
                config.vcs.dirty_action, config.vcs.dirty_action
            ),
        ),
        Defense(
            name="transcript_max_bytes",
            value=runtime.transcript_max_bytes,
            active=True,
            detail="a transcript keeps its head and tail within this size",
        ),
    ]


def _number(value: Any) -> float | None:
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    return None


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def describe_reaping(reaping: dict[str, Any]) -> str:
    """One line for how serve kills what a round leaves: its cgroup, or the fallback and why."""
    if reaping.get("mode") == "cgroup":
        return f"a cgroup per round under {reaping.get('cgroup')}"
    return f"subreaper and process scans (no cgroup: {reaping.get('reason')})"
