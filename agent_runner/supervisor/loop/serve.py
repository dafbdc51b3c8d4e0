"""The supervisor loop: gates, rounds, policy decisions, waits, and a clean exit (SPEC §5)."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from agent_runner import __version__, vcs
from agent_runner.clock import SYSTEM_CLOCK, Clock
from agent_runner.config import Config, read_prompt
from agent_runner.errors import AgentRunnerError, ConfigError, ExitCode, GitError
from agent_runner.events import EventLog, format_event
from agent_runner.plugins.parent.hooks import Hooks
from agent_runner.sdnotify import Notifier
from agent_runner.supervisor.agent.cgroup import (
    CgroupUnavailable,
    RoundCgroup,
    RoundCgroups,
    locate,
)
from agent_runner.supervisor.agent.confinement import AgentConfinement
from agent_runner.supervisor.agent.prefork import Prefork
from agent_runner.supervisor.agent.process import AgentProcess, transcript_path
from agent_runner.supervisor.agent.strays import (
    become_subreaper,
    marked_environment,
    process_start_ticks,
)
from agent_runner.supervisor.agent.transcript import prune_transcripts
from agent_runner.supervisor.boot.checks import require, require_log_dir
from agent_runner.supervisor.boot.instance import InstanceLock, project_key
from agent_runner.supervisor.boot.startup import (
    admit_plugins,
    clear_git_leftovers,
    reap_previous_serve,
)
from agent_runner.supervisor.loop import budget
from agent_runner.supervisor.loop.hooks import SpawnGate, dirty_decider, observe_round
from agent_runner.supervisor.loop.notify import Notifications
from agent_runner.supervisor.loop.policy import (
    Decision,
    Limits,
    LoopState,
    Outcome,
    after_internal_error,
    decide,
)
from agent_runner.supervisor.loop.reload import ConfigWatcher
from agent_runner.supervisor.loop.round import RoundResult, RoundRunner
from agent_runner.supervisor.loop.state import (
    encode_state,
    loop_from_state,
    recent_summaries,
    recover_ledger,
    recover_state,
    write_state,
)
from agent_runner.supervisor.loop.stopping import REQUEST_FILE, STOP_FILE_CHECK_S, StopControl

DRAIN_EXTEND_USEC = 15_000_000
KEPT_SUMMARIES = 10  # the last rounds state.json keeps for peek, newest first
PROMPT_RETRY_S = 2.0
BUDGET_RECHECK_S = STOP_FILE_CHECK_S  # a cap raised by a live edit applies this soon
WALL_CLOCK_RECHECK_S = STOP_FILE_CHECK_S  # costs no extra wakeup: the stop file is due anyway


def run_serve(
    config: Config,
    *,
    max_rounds: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
    echo: Callable[[str], None] | None = None,
) -> ExitCode:
    """Run the loop until a stop, max_rounds or a breaker; return the exit code.

    A cleanup that fails (a read-only log_dir) is reported on stderr; it never changes the code.
    """
    runtime = config.runtime
    # First of all: from here on a stop signal during boot is a stop, not a traceback.
    stop = StopControl(
        runtime.stop_mode,
        runtime.stop_file,
        lambda _kind, **_fields: None,  # replaced by the event log before anything is emitted
        request_file=runtime.log_dir / REQUEST_FILE,
    )
    stop.install()
    try:
        require_log_dir(config)  # nowhere to write the events of the other checks otherwise
        events = EventLog(runtime.log_dir, clock=clock, echo=echo or _console)
        stop.emit = events.emit
        notify = Notifications.for_config(config, events.emit)
        events.tap = notify.offer
        lock = InstanceLock(runtime.log_dir, runtime.work_dir)
        try:
            lock.acquire()
            try:
                require(config)
            except ConfigError as exc:
                events.record("config_broken", reason=str(exc))  # the CLI prints it, once
                raise
            serve = Serve(config, events, stop, clock, max_rounds, lock=lock, notify=notify)
            with marked_environment(runtime.log_dir):
                try:
                    return serve.run()
                finally:
                    serve.release_rounds()
        finally:
            notify.drain()  # after a crash too: what was started gets its few seconds
            for problem in lock.release():
                print(f"agent-runner: warning: {problem}", file=sys.stderr, flush=True)
            events.close()
    finally:
        stop.uninstall()


def _console(line: str) -> None:
    """serve's console (the journal under systemd): one readable line per event."""
    print(format_event(json.loads(line)), file=sys.stderr, flush=True)


@dataclass
class Serve:
    config: Config
    events: EventLog
    stop: StopControl
    clock: Clock
    max_rounds_override: int | None
    loop: LoopState = field(default_factory=LoopState)
    rounds_run: int = 0
    last_round: int = 0
    last_summary: dict[str, Any] | None = None
    recent: list[dict[str, Any]] = field(default_factory=list)  # newest first
    backoff_reason: str | None = None  # what the provider said, while a back-off is due
    notifier: Notifier = field(default_factory=Notifier)
    in_git: bool = False
    head: str | None = None
    hooks: Hooks | None = None  # set once plugins are admitted
    pinned: vcs.TreeIdentity | None = None
    spend: budget.Ledger = field(default_factory=budget.Ledger)
    notify: Notifications | None = None
    _budget_shown: budget.BudgetWait | None = None
    lock: InstanceLock | None = None
    cgroups: RoundCgroups | None = None
    reaping: dict[str, Any] = field(default_factory=dict)
    prefork: Prefork = field(default_factory=Prefork)
    confinement: AgentConfinement | None = None
    lost: str | None = None
    _state: dict[str, Any] = field(default_factory=dict)
    _next_watchdog: float = 0.0
    _stopping_sent: bool = False
    _state_error: str | None = None
    # The round that ended is not in state.json yet (see _decide); the next write carries it.
    _round_end_unsaved: bool = False
    _saved: str | None = None  # the last state written, but for updated_at
    _pruned_upto: int = 0  # transcripts up to this round are gone; 0: scan the folder once

    def run(self) -> ExitCode:
        """The loop; an unexpected error still ends with serve_stop and the reason."""
        try:
            return self._run()
        except AgentRunnerError as exc:
            if exc.exit_code != ExitCode.FAILURE:
                # A refusal with its own exit code (config, lock): reported, not a bug.
                self.events.emit("serve_stop", reason=str(exc), rounds=self.rounds_run)
                self._save("stopped", reason=str(exc))
                raise
            return self._crashed(exc)
        except Exception as exc:
            return self._crashed(exc)
        finally:
            if self.pinned is not None:
                self.pinned.close()
            if self.hooks is not None:
                self.hooks.close()
            if self.confinement is not None:
                self.confinement.close()

    def _crashed(self, exc: Exception) -> ExitCode:
        """An internal error: recorded as phase `crashed`; exit 69 once it keeps happening."""
        reason = f"internal error: {type(exc).__name__}: {exc}"
        self.loop, decision = after_internal_error(self.loop, self._limits())
        if decision.breaker is not None:
            self.events.emit(decision.breaker, count=decision.count, reason=reason[:300])
            return self._finish(f"gave up: {decision.breaker}", ExitCode.GAVE_UP)
        self.events.emit("serve_stop", reason=reason, rounds=self.rounds_run)
        # Not `stopped`: the next start must keep the counters, or each restart of a crashing
        # serve would look deliberate and no breaker could ever trip.
        self._save("crashed", reason=reason)
        raise exc

    def _run(self) -> ExitCode:
        emit = self.events.emit
        # The previous serve's counters come first: even a crash from here on must keep them.
        previous = recover_state(self.config.runtime.log_dir, emit, self.clock.now())
        self._restore(previous)
        self.spend = recover_ledger(previous, self.config.runtime.log_dir, self.clock.now())
        self._state = {
            "supervisor": {
                "pid": os.getpid(),
                "start_ticks": process_start_ticks(os.getpid()),
                "started_at": self.clock.now(),
                "version": __version__,
            },
            "last_round": previous.get("last_round"),
            # Who this log_dir belongs to, for `status --all`.
            "project": {
                "work_dir": str(self.config.runtime.work_dir),
                "config": str(self.config.path),
            },
            "last_rounds": self.recent,
            "backoff_reason": self.backoff_reason,
            "sandbox": None,
            "plugins": [],
        }
        become_subreaper()
        self._isolate_rounds(previous)
        spawn_gate = self._admit_plugins()
        # work_dir only changes on restart, so whether it is a git tree is settled once.
        work_dir = self.config.runtime.work_dir
        repo = None
        try:
            repo = vcs.open_repo(work_dir)
            self.head, self.in_git = repo.head, True
        except GitError:
            # Not a repository we may act on (none, or redirected): secure_tree says which.
            self.head, self.in_git = None, vcs.is_work_tree(work_dir)
        # From here on every round and every git action proves it is still this tree.
        self.pinned = vcs.pin_tree(work_dir, repo)
        watcher = ConfigWatcher(self.config, emit)
        emit(
            "serve_start",
            pid=os.getpid(),
            version=__version__,
            work_dir=str(self.config.runtime.work_dir),
            log_dir=str(self.config.runtime.log_dir),
        )
        self.notifier.send(READY=1, STATUS="ready")
        self._save("starting")
        while True:
            self._reload(watcher)
            reason = self._gates()
            if reason is not None:
                return self._finish(reason, ExitCode.OK)
            if self._budget_wait():
                continue
            changed = self.pinned.problem()
            if changed is not None:
                # Spawning now would start the agent in whatever work_dir has become.
                emit("work_tree_changed", round=self.last_round, path=str(work_dir), reason=changed)
                return self._finish("gave up: work_tree_changed", ExitCode.GAVE_UP)
            if self._spawn_deferred(spawn_gate):
                continue
            prompt = self._prompt(watcher)
            if prompt is None:
                continue
            result = self._round(prompt)
            if result.tree is not None and result.tree.action == "work_tree_changed":
                return self._finish("gave up: work_tree_changed", ExitCode.GAVE_UP)
            decision = self._decide(result)
            if decision.action == "give_up":
                return self._give_up(decision, result)
            if self.stop.requested:
                return self._finish(f"stopped ({self.stop.source})", ExitCode.OK)
            if self._max_rounds_reached():
                return self._finish("max_rounds", ExitCode.OK)
            if decision.action == "continue" and decision.delay_s > 0:
                self._save("restart_delay", delay_s=decision.delay_s)  # with the round's end
                self.notifier.status(f"round {self.last_round} done; next in {decision.delay_s:g}s")
                self._sleep(decision.delay_s)

    def _restore(self, previous: dict[str, Any]) -> None:
        """Take over what the previous serve left: round numbers, counters, recent rounds."""
        number = previous.get("last_round_number", 0)
        self.last_round = number if type(number) is int and number >= 0 else 0
        self.loop = loop_from_state(
            previous.get("loop"),
            clean_exit=(previous.get("supervisor") or {}).get("phase") == "stopped",
            latest=self.clock.now() + self.config.backoff.max_wait_s,
        )
        self.recent = recent_summaries(previous)[:KEPT_SUMMARIES]
        reason = previous.get("backoff_reason")
        if self.loop.backoff_until is not None and isinstance(reason, str):
            self.backoff_reason = reason

    def _admit_plugins(self) -> SpawnGate:
        """Admit the plugins; their hooks and event kinds from here on, until serve exits."""
        self._state["sandbox"], self.hooks = admit_plugins(
            self.config, self.events.emit, heartbeat=self._watchdog
        )
        for plugin in self.hooks.admitted():
            self.events.allow_plugin_kinds(plugin.name, plugin.event_kinds)
        return SpawnGate(self.hooks, self.events.emit)

    def _reload(self, watcher: ConfigWatcher) -> None:
        """The config for the next round, applied to what serve holds besides it."""
        self.config = watcher.refresh()
        if self.notify is not None:
            self.notify.configure(self.config.notify)
        self.stop.default_mode = self.config.runtime.stop_mode
        self.stop.stop_file = self.config.runtime.stop_file

    def _spawn_deferred(self, gate: SpawnGate) -> bool:
        """Ask the spawn hooks; True when one deferred or skipped the round (after its wait)."""
        if self.hooks is not None and self.hooks.has("spawn"):
            self._save_round_end()  # a hook may take hook_timeout_s to answer
        wait = gate.ask(self.config, self.last_round + 1, self.last_summary)
        if wait is None:
            return False
        self._save("deferred", **wait.detail(self.clock.now()))
        self.notifier.status(f"round {self.last_round + 1}: {wait.action} by {wait.hook}")
        self._sleep(wait.seconds)
        return True

    def _gates(self) -> str | None:
        """Why the loop must stop now, or None; waits out an active back-off."""
        self.stop.check_stop_file()
        if self.stop.requested:
            return f"stopped ({self.stop.source})"
        if self._max_rounds_reached():
            return "max_rounds"
        until = self.loop.backoff_until
        if until is not None and until > self.clock.now():
            wait_s = until - self.clock.now()
            self.events.emit(
                "backoff_wait",
                classification=self.loop.backoff_class,
                until=until,
                wait_s=round(wait_s, 3),
                source=self.loop.backoff_source,
            )
            self._save("backoff", until=until)
            clock_text = time.strftime("%H:%M", time.localtime(until))
            self.notifier.status(f"back-off until {clock_text} ({self.loop.backoff_class})")
            if not self._sleep_until(until):
                return f"stopped ({self.stop.source})"
        return None

    def _budget_wait(self) -> bool:
        """Wait while a spend cap is reached; True when it waited (so the gates run again)."""
        now = self.clock.now()
        wait = budget.check(self.spend, self.config.budget, now)
        if wait is None:
            self._budget_shown = None
            return False
        if wait != self._budget_shown:
            self._budget_shown = wait
            self.events.emit(
                "budget_wait", cap=wait.cap, used=wait.used, limit=wait.limit, until=wait.until
            )
            self._save("budget_wait", **asdict(wait))
            clock_text = time.strftime("%H:%M", time.localtime(wait.until))
            self.notifier.status(f"{wait.cap} reached; waiting until {clock_text}")
        # Back to the gates every few seconds: a stop file, or a cap raised by a live edit,
        # applies without waiting out the window.
        self._sleep_until(min(wait.until, now + BUDGET_RECHECK_S))
        return True

    def _sleep_until(self, until: float) -> bool:
        """Sleep until wall-clock time `until`; False when a stop interrupted it.

        The wall clock is read again every few seconds: one that was far behind when the wait
        began (and is then corrected) must not stretch a 20 s reset into days. The wait never
        outlasts the monotonic time it started with, so a clock set back cannot stretch it.
        """
        latest = self.clock.monotonic() + max(0.0, until - self.clock.now())
        while True:
            remaining = min(until - self.clock.now(), latest - self.clock.monotonic())
            if remaining <= 0:
                return True
            if not self._sleep(min(remaining, WALL_CLOCK_RECHECK_S)):
                return False

    def _max_rounds_reached(self) -> bool:
        limit = self.max_rounds_override or self.config.runtime.max_rounds
        if limit and self.rounds_run >= limit:
            self.events.emit("max_rounds_reached", rounds=self.rounds_run)
            return True
        return False

    def _prompt(self, watcher: ConfigWatcher) -> bytes | None:
        """The round's prompt; None (after a wait) while a prompt file is missing or empty."""
        try:
            prompt = read_prompt(self.config)
        except ConfigError as exc:
            # An operator mid-edit: report it like a broken config and wait for the fix.
            watcher.report_failure("prompt", str(exc))
            self._save("waiting_for_prompt")
            self._sleep(PROMPT_RETRY_S)
            return None
        watcher.clear_failure("prompt")
        return prompt

    def _round(self, prompt: bytes) -> RoundResult:
        assert self.hooks is not None
        self.last_round += 1
        self.rounds_run += 1
        self.spend = self.spend.record(self.clock.now(), rounds=1)
        self.notifier.status(f"round {self.last_round} running")
        runner = RoundRunner(
            self.config,
            self.events.emit,
            self.stop,
            self.clock,
            on_spawn=self._on_spawn,
            in_git=self.in_git,
            pinned=self.pinned,
            cgroups=self.cgroups,
            cgroup_failed=self._cgroup_failed,
            prefork=self.prefork,
            confinement=self.confinement,
            tick=self._round_tick,
            tick_s=min(STOP_FILE_CHECK_S, self.notifier.watchdog_interval_s or STOP_FILE_CHECK_S),
            keep_pids=self._helper_pids,
            decide_dirty=dirty_decider(self.hooks, self.config),
        )
        # HEAD as the last round left it: the only process between rounds is this one.
        result = runner.run(self.last_round, prompt, self.head)
        if not self.stop.requested:
            # A stop is due now: no observer may hold it up by hook_timeout_s.
            result = observe_round(
                self.hooks, self.config, result, self.events.emit, self.clock.now()
            )
        self._pruned_upto = prune_transcripts(
            transcript_path(self.config.runtime.log_dir, self.last_round).parent,
            newest=self.last_round,
            keep=self.config.runtime.transcript_keep_rounds,
            above=self._pruned_upto,
        )
        if result.tree is not None:
            self.head = result.tree.head_after
        usage = result.findings.usage
        if usage is not None:
            tokens, cost = budget.usage_amounts(
                usage.input_tokens, usage.output_tokens, usage.cost_usd
            )
            self.spend = self.spend.record(self.clock.now(), tokens=tokens, cost_usd=cost)
        self.last_summary = {**result.summary(), "ended_at": self.clock.now()}
        self.recent = [self.last_summary, *self.recent][:KEPT_SUMMARIES]
        return result

    def _helper_pids(self) -> tuple[int, ...]:
        """serve's own helpers (the plugin fork server, notifications): never leftovers."""
        hooks = self.hooks.helper_pids() if self.hooks is not None else ()
        notes = self.notify.running_pids() if self.notify is not None else ()
        return (*hooks, *notes)

    def _on_spawn(
        self,
        number: int,
        agent: AgentProcess,
        cgroup: RoundCgroup | None,
        landlock_abi: int | None,
    ) -> None:
        # Runs while the agent waits at its gate: once this returns, its program starts.
        self._save(
            "running",
            round={
                "number": number,
                "pid": agent.pid,
                "pgid": agent.pgid,
                "start_ticks": agent.start_ticks,
                "started_at": self.clock.now(),
                "cgroup": None if cgroup is None else str(cgroup.path),
                "budget_s": self.config.runtime.round_budget_s,
                "confined": landlock_abi is not None,
                "landlock_abi": landlock_abi,
            },
        )

    def _clean_up_after(self, previous: dict[str, Any]) -> None:
        """Kill whatever the previous serve left running, then what its git left behind."""
        reap_previous_serve(
            previous,
            self.events.emit,
            cgroups=self.cgroups,
            key=project_key(self.config.runtime.work_dir),
            log_dir=self.config.runtime.log_dir,
            previous_holder=self.lock.previous if self.lock else None,
        )
        if self.lock is not None and self.lock.previous is not None:
            # A serve killed mid-git leaves its temporary index and locks behind.
            clear_git_leftovers(self.config.runtime.work_dir, self.events.emit)

    def _isolate_rounds(self, previous: dict[str, Any]) -> None:
        """Cgroups for the rounds, nothing left of the previous serve, the agents' confinement.

        In this order: the cleanup needs the cgroups, and the previous serve's agents (the
        last writers of its TMPDIRs) are gone before `[agent] confine` empties them.
        """
        self._find_cgroups()
        self._clean_up_after(previous)
        self.confinement = AgentConfinement.prepare(self.config, self.events.emit)
        self.prefork.landlock = self.confinement is not None and self.confinement.confines

    def _find_cgroups(self) -> None:
        """Rounds get cgroups of their own where the host allows; else say why, once."""
        if self.config.runtime.round_cgroup == "off":
            self._cgroup_failed('runtime.round_cgroup is "off"')
            return
        try:
            self.cgroups = locate(project_key(self.config.runtime.work_dir))
        except CgroupUnavailable as exc:
            self._cgroup_failed(str(exc))
            return
        self.reaping = {"mode": "cgroup", "cgroup": str(self.cgroups.base)}

    def release_rounds(self) -> None:
        """No round follows: the children started for the next rounds go, and our cgroup folder."""
        self.prefork.close()
        if self.cgroups is not None:
            self.cgroups.close()

    def _cgroup_failed(self, reason: str) -> None:
        if self.cgroups is not None:
            self.cgroups.close()
            self.cgroups = None
        if self.reaping.get("mode") != "fallback":
            self.reaping = {"mode": "fallback", "reason": reason}
            self.events.emit("round_cgroup_unavailable", reason=reason)

    def _decide(self, result: RoundResult) -> Decision:
        findings = result.findings
        tree = result.tree
        outcome = Outcome(
            exit_cause=result.exit.cause,
            duration_s=result.exit.duration_s,
            progressed=tree.progressed if tree else False,
            transient=findings.transient.classification if findings.transient else None,
            reset_at=findings.transient.reset_at if findings.transient else None,
            auth_error=findings.auth_error is not None,
            setup_error=findings.setup_error is not None,
            reason=findings.auth_error or findings.setup_error or result.exit.cause,
        )
        self.loop, decision = decide(
            self.loop,
            outcome,
            self._limits(),
            now=self.clock.now(),
            jitter=random.random(),  # noqa: S311 -- spreading retries, not secrecy
        )
        if decision.action == "backoff":
            self.backoff_reason = findings.transient.detail if findings.transient else None
        elif self.loop.backoff_until is None:
            self.backoff_reason = None
        if decision.recovered:
            self.events.emit(
                "backoff_recovered", round=result.number, classification=decision.recovered
            )
        if (self._state.get("round") or {}).get("number") != result.number:
            # Its agent never started, nor may the next ones (a program gone missing): each
            # such round is written at once, or a run of them would be until the breaker.
            self._save("between_rounds")
            return decision
        # Not written here: the next write carries the round's end, and when the next round
        # starts at once that is its record before exec, one fsync'd write instead of two.
        # Until then a SIGKILL loses this round's outcome, as one during its git always did;
        # what runs in between never waits (each wait, and every way out, writes it first).
        self._round_end_unsaved = True
        return decision

    def _save_round_end(self) -> None:
        """Write the round that ended, unless a later write already carried it."""
        if self._round_end_unsaved:
            self._save("between_rounds")

    def _limits(self) -> Limits:
        return Limits(
            restart_delay_s=self.config.runtime.restart_delay_s,
            max_restart_delay_s=self.config.runtime.max_restart_delay_s,
            breakers=self.config.breakers,
            backoff=self.config.backoff,
        )

    def _give_up(self, decision: Decision, result: RoundResult) -> ExitCode:
        assert decision.breaker is not None
        found = result.findings
        reason = (
            f"round {result.number}: {found.auth_error or found.setup_error or result.exit.cause}"
        )
        self.events.emit(decision.breaker, count=decision.count, reason=reason)
        return self._finish(f"gave up: {decision.breaker}", ExitCode.GAVE_UP)

    def _finish(self, reason: str, code: ExitCode) -> ExitCode:
        self._save_round_end()  # before the drain below, which can take seconds
        if self.lost is not None:
            reason, code = f"log_dir lost: {self.lost}", ExitCode.FAILURE
        self.stop.announce()
        self.notifier.send(STATUS=reason)
        self._note_stop()
        self.events.emit("serve_stop", reason=reason, rounds=self.rounds_run)
        if self.notify is not None:
            self.notify.drain()  # a give-up's notification must get out before serve does
        self._save("stopped", reason=reason)
        self.notifier.close()
        return code

    def _sleep(self, seconds: float) -> bool:
        """Sleep, pinging the watchdog; False when a stop interrupted it."""
        self._save_round_end()
        deadline = self.clock.monotonic() + seconds
        interval = self.notifier.watchdog_interval_s
        while True:
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return True
            self._watchdog()
            step = remaining if interval is None else min(remaining, interval)
            if not self.stop.sleep(step, self.clock.monotonic):
                return False

    def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval_s
        now = self.clock.monotonic()
        if interval is not None and now >= self._next_watchdog:
            self._next_watchdog = now + interval
            self.notifier.send(WATCHDOG=1)

    def _note_stop(self) -> None:
        """STOPPING=1 as soon as a stop is known, not only on the way out."""
        if not self._stopping_sent:
            self._stopping_sent = True
            self.notifier.send(STOPPING=1)

    def _round_tick(self) -> None:
        """Called every few seconds while the agent runs: watchdog, lock and STATUS upkeep."""
        self._watchdog()
        self._check_log_dir()
        if self.stop.requested:
            self._note_stop()
            if self._state.get("stop") != self._pending_stop():
                # What `stop --after-round` waits to see, and `peek` shows.
                self._save("running", round=self._state.get("round"))
        if self.stop.mode == "finish_round":
            # Draining a round can outlast TimeoutStopSec: keep asking systemd for more time
            # (each extension outlasts the interval between two of them).
            self.notifier.send(EXTEND_TIMEOUT_USEC=DRAIN_EXTEND_USEC)
        if self.notifier.enabled:
            started = self._state.get("round") or {}
            minutes = int((self.clock.now() - started.get("started_at", self.clock.now())) // 60)
            self.notifier.status(f"round {self.last_round} running {minutes}m")

    def _save(self, phase: str, **extra: Any) -> None:
        if not self._state or self._check_log_dir():
            return  # nothing known yet that a state file could hold, or log_dir is not ours
        self._round_end_unsaved = False
        self._state["supervisor"]["phase"] = phase
        self._state["supervisor"].pop("updated_at", None)
        self._state["round"] = extra.pop("round", None) if phase == "running" else None
        self._state["phase_detail"] = extra
        self._state["last_round_number"] = self.last_round
        self._state["rounds_run"] = self.rounds_run
        if self.last_summary is not None:
            self._state["last_round"] = self.last_summary
        self._state["last_rounds"] = self.recent
        self._state["backoff_reason"] = self.backoff_reason
        self._state["loop"] = asdict(self.loop)
        if self.hooks is not None:
            self._state["plugins"] = self.hooks.state()
        self._state["budget"] = self.spend.to_state()
        if self.notify is not None:
            self._state["notify"] = self.notify.state()
        self._state["reaping"] = self.reaping
        self._state["stop"] = self._pending_stop()
        self._watchdog()
        # A wait that wakes to find nothing changed (a missing prompt, every 2 s) writes nothing.
        unchanged = encode_state(self._state)
        if unchanged == self._saved:
            return
        self._state["supervisor"]["updated_at"] = self.clock.now()
        try:
            write_state(self.config.runtime.log_dir, self._state)
        except OSError as exc:
            self._saved = None
            # A full disk must not stop supervision; the next transition tries again.
            if str(exc) != self._state_error:
                self._state_error = str(exc)
                self.events.emit("state_write_failed", reason=str(exc))
        else:
            self._saved = unchanged
            self._state_error = None

    def _check_log_dir(self) -> bool:
        """True once log_dir is gone or replaced: then serve stops, as for a terminate stop."""
        if self.lost is None and self.lock is not None:
            self.lost = self.lock.check(self.events.emit)
            if self.lost is not None:
                self.events.emit(
                    "log_dir_lost", path=str(self.config.runtime.log_dir), reason=self.lost
                )
                self.stop.interrupt("log_dir_lost")
        return self.lost is not None

    def _pending_stop(self) -> dict[str, str] | None:
        if self.stop.mode is None:
            return None
        return {"mode": self.stop.mode, "source": self.stop.source}
