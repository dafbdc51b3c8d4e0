"""One round: spawn the agent, wait under the budget, reap, parse, secure the tree (SPEC §5.1)."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_runner import vcs
from agent_runner.clock import Clock
from agent_runner.config import Config
from agent_runner.events import Emit, redact_argv
from agent_runner.parsers import (
    Findings,
    parse_tail,
    read_transcript_tail,
    reads_transcript,
    report_findings,
)
from agent_runner.supervisor.agent.cgroup import (
    NO_USAGE,
    CgroupUnavailable,
    RoundCgroup,
    RoundCgroups,
)
from agent_runner.supervisor.agent.confinement import AgentConfinement, RoundConfinement
from agent_runner.supervisor.agent.prefork import Prefork
from agent_runner.supervisor.agent.process import (
    AgentExit,
    AgentProcess,
    SpawnError,
    agent_environment,
    deliver_prompt,
    transcript_path,
)
from agent_runner.supervisor.agent.strays import reap_leftovers
from agent_runner.supervisor.agent.transcript import TranscriptRelay
from agent_runner.supervisor.agent.writepolicy import round_tmpdir
from agent_runner.supervisor.dirty import Decide, TreeReport, secure_tree
from agent_runner.supervisor.loop.silence import SilenceWatch
from agent_runner.supervisor.loop.stopping import STOP_FILE_CHECK_S, StopControl

# systemd talks to serve through these; an agent that inherited them could speak for serve.
SUPERVISOR_ONLY_ENV = frozenset(
    {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}
)


@dataclass(frozen=True)
class RoundResult:
    """Everything the loop policy and state.json need from one round."""

    number: int
    exit: AgentExit
    findings: Findings
    tree: TreeReport | None
    # What the parser read of the transcript (parsers.TAIL_BYTES); None when it read nothing.
    transcript_tail: bytes | None = None

    def summary(self) -> dict[str, Any]:
        transient = self.findings.transient
        return {
            "round": self.number,
            "exit_code": self.exit.exit_code,
            "signal": self.exit.signal,
            "exit_cause": self.exit.cause,
            "duration_s": round(self.exit.duration_s, 3),
            "transient": transient.classification if transient else None,
            "auth_error": self.findings.auth_error is not None,
            "setup_error": self.findings.setup_error is not None,
            "tree_action": self.tree.action if self.tree else None,
            "tree_ref": self.tree.ref if self.tree else None,
        }


@dataclass
class RoundRunner:
    """Runs rounds for one serve.

    `on_spawn` records the agent (and the Landlock ABI confining it, or None) in state.json
    before its program starts. With `cgroups` each round runs in a cgroup of its own;
    `cgroup_failed` hears once why that stopped working. `prefork` holds the children started
    ahead for the next rounds. With `confinement` each agent gets a TMPDIR of its own and,
    where the kernel offers Landlock, writes only where writepolicy.py says.
    """

    config: Config
    emit: Emit
    stop: StopControl
    clock: Clock
    on_spawn: Callable[[int, AgentProcess, RoundCgroup | None, int | None], None]
    in_git: bool = True
    pinned: vcs.TreeIdentity | None = None
    tick: Callable[[], None] = lambda: None
    tick_s: float = STOP_FILE_CHECK_S
    keep_pids: Callable[[], Collection[int]] = tuple
    decide_dirty: Decide | None = None  # None: the builtin dirty handler
    cgroups: RoundCgroups | None = None
    cgroup_failed: Callable[[str], None] = lambda _reason: None
    prefork: Prefork = field(default_factory=Prefork)
    confinement: AgentConfinement | None = None

    def run(self, number: int, prompt: bytes, head_before: str | None) -> RoundResult:
        """Run round `number`; `head_before` is HEAD as the previous round left it."""
        config, emit = self.config, self.emit
        runtime = config.runtime
        emit("round_start", round=number)
        transcript = transcript_path(runtime.log_dir, number)
        argv, stdin_data = deliver_prompt(
            config.agent.command, prompt.decode("utf-8", "replace"), config.agent.prompt_delivery
        )
        env = round_environment(config, number)
        cgroup: RoundCgroup | None = None
        confined: RoundConfinement | None = None
        try:
            if self.confinement is not None:
                confined = self.confinement.enter(number)
            abi = confined.landlock_abi if confined else None
            relay = TranscriptRelay.open(transcript, runtime.transcript_max_bytes)
            try:
                prepared = self.prefork.take(number, self.cgroups, self._lose_cgroups)
                cgroup = prepared.cgroup
                agent = AgentProcess.spawn(
                    argv,
                    cwd=runtime.work_dir,
                    env=env,
                    stdin_data=stdin_data,
                    transcript=transcript,
                    output=relay.agent_fd,
                    child=prepared.child,
                    before_exec=lambda agent: self.on_spawn(number, agent, cgroup, abi),
                    confine=confined.landlock if confined else None,
                )
            except (SpawnError, OSError):
                relay.finish()
                raise
        except (SpawnError, OSError) as exc:  # OSError: the gated child or the TMPDIR failed
            if cgroup is not None:
                cgroup.remove()
            return self._spawn_failed(number, exc)
        relay.start()
        # The next rounds' children start and join their cgroups while this agent works.
        self.prefork.prepare(number, self.cgroups, self._lose_cgroups)
        try:
            emit(
                "agent_spawn",
                round=number,
                pid=agent.pid,
                pgid=agent.pgid,
                argv=loggable_argv(argv, config.agent.prompt_delivery),
                transcript=str(transcript),
                cgroup=None if cgroup is None else str(cgroup.path),
                confined=abi is not None,
                landlock_abi=abi,
            )
            cause = self._wait(number, agent, relay)
        except BaseException:
            # Whatever broke, no agent may outlive its supervisor's attention.
            agent.terminate(config.agent.sigterm_grace_s)
            self._reap(cgroup)
            self._leave(number)
            relay.finish()
            raise
        leftovers = self._reap(cgroup)
        self._leave(number)  # every writer of its TMPDIR is gone now
        usage = cgroup.usage() if cgroup is not None else NO_USAGE
        if cgroup is not None:
            cgroup.remove()
        if leftovers:
            emit("round_leftovers_reaped", round=number, pids=leftovers)
        self._file_transcript(number, relay)
        result = agent.result(cause)
        emit(
            "agent_exit",
            round=number,
            exit_code=result.exit_code,
            signal=result.signal,
            exit_cause=result.cause,
            duration_s=round(result.duration_s, 3),
        )
        findings, tail = self._parse(transcript, result.cause)
        report_findings(findings, round_no=number, emit=emit)
        tree = self._secure(number, result.cause, head_before)
        emit(
            "round_end",
            round=number,
            exit_cause=result.cause,
            duration_s=round(result.duration_s, 3),
            memory_peak_bytes=usage.memory_peak_bytes,
            cpu_s=usage.cpu_s,
        )
        return RoundResult(number, result, findings, tree, tail)

    def _parse(self, transcript: Path, cause: str) -> tuple[Findings, bytes | None]:
        """The transcript's findings, and the tail they came from (None if nothing was read).

        Read once: the round observers get the end of the same bytes (loop/hooks.py).
        """
        parser = self.config.agent.parser
        if not reads_transcript(parser):
            return Findings(), None
        tail = read_transcript_tail(transcript)
        patterns = self.config.agent.patterns
        findings = parse_tail(
            parser, tail, now=self.clock.now(), exit_cause=cause, patterns=patterns
        )
        return findings, tail

    def _file_transcript(self, number: int, relay: TranscriptRelay) -> None:
        """Finish the transcript: every writer is gone now."""
        report = relay.finish()
        path = str(relay.path)
        if report.bytes_left_out:
            self.emit(
                "transcript_truncated",
                round=number,
                path=path,
                bytes_left_out=report.bytes_left_out,
            )
        if report.error is not None:
            self.emit("transcript_write_failed", round=number, path=path, reason=report.error)

    def _spawn_failed(self, number: int, exc: Exception) -> RoundResult:
        # A vanished binary is a failed round: the crash-loop breaker ends it, not a traceback.
        self._leave(number)
        self.emit("agent_spawn_failed", round=number, reason=str(exc))
        failed = AgentExit(exit_code=None, signal=None, cause="error", duration_s=0.0)
        self.emit(
            "round_end",
            round=number,
            exit_cause="error",
            duration_s=0.0,
            memory_peak_bytes=None,
            cpu_s=None,
        )
        return RoundResult(number, failed, Findings(), None)

    def _leave(self, number: int) -> None:
        if self.confinement is not None:
            self.confinement.leave(number)

    def _lose_cgroups(self, reason: str) -> None:
        """Cgroups stopped working: none for the rest of this round either (serve drops its
        own), so the children started for the next rounds are not put in one."""
        self.cgroups = None
        self.cgroup_failed(reason)

    def _reap(self, cgroup: RoundCgroup | None) -> list[int]:
        """Kill what is left of the round (its cgroup first, as a unit); the pids killed."""
        killed: list[int] = []
        if cgroup is not None:
            try:
                killed = cgroup.kill()
            except CgroupUnavailable as exc:
                self._lose_cgroups(str(exc))
        # Also reaps the zombies cgroup.kill made, and anything that left the cgroup; spares
        # the helpers that live between rounds and the children started for the next ones.
        keep = (*self.keep_pids(), *self.prefork.pids())
        return sorted({*killed, *reap_leftovers(keep=keep)})

    def _wait(self, number: int, agent: AgentProcess, relay: TranscriptRelay) -> str | None:
        """Wait for exit, the budget, silence or a stop; the exit-cause override, if any."""
        budget_s = self.config.runtime.round_budget_s
        deadline = self.clock.monotonic() + budget_s
        grace_s = self.config.agent.sigterm_grace_s
        idle_s = self.config.runtime.idle_timeout_s
        silence = (
            SilenceWatch(idle_s, relay, self.config.agent.parser, self.clock.monotonic)
            if idle_s > 0
            else None
        )
        while True:
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                self.emit("round_timeout_kill", round=number, budget_s=budget_s)
                agent.terminate(grace_s)
                return "timeout"
            step = min(remaining, self.tick_s)
            if silence is not None:
                silent_s = silence.silent_s()
                if silent_s is not None:
                    self.emit("round_idle_kill", round=number, idle_s=round(silent_s, 1))
                    agent.terminate(grace_s)
                    return "idle"
                step = min(step, silence.due_in())
            if agent.wait(step, wake_fd=self.stop.wake_fd):
                return None
            self.tick()
            self.stop.drain()
            self.stop.check_stop_file()
            self.stop.announce()
            if self.stop.mode == "terminate":
                agent.terminate(grace_s, wake_fd=None)
                return "stopped"

    def _secure(self, number: int, cause: str, head_before: str | None) -> TreeReport | None:
        if not self.in_git:
            return None
        work_dir = self.config.runtime.work_dir
        return secure_tree(
            work_dir,
            round_no=number,
            exit_cause=cause,
            head_before=head_before,
            dirty_action=self.config.vcs.dirty_action,
            idempotency_s=self.config.vcs.stash_idempotency_s,
            state_dir=self.config.runtime.log_dir,
            emit=self.emit,
            now=self.clock.now(),
            decide=self.decide_dirty,
            protected=own_paths(self.config),
            pinned=self.pinned,
            max_file_bytes=self.config.vcs.dirty_file_max_bytes,
            keep_days=self.config.vcs.rescue_keep_days,
        )


def round_environment(config: Config, number: int) -> dict[str, str]:
    """The environment round `number`'s agent is started with."""
    runtime = config.runtime
    env = agent_environment(
        config.agent.env,
        round_no=number,
        log_dir=runtime.log_dir,
        transcript=transcript_path(runtime.log_dir, number),
        base={k: v for k, v in os.environ.items() if k not in SUPERVISOR_ONLY_ENV},
    )
    if config.agent.confine != "off":
        # Where a confined agent's temporary files can go: the system's /tmp is not writable.
        env["TMPDIR"] = str(round_tmpdir(runtime.log_dir, number))
    return env


def own_paths(config: Config) -> tuple[str, ...]:
    """The supervisor's own inputs and logs: stashing them would undo an operator's live edit."""
    return (
        str(config.path),
        str(config.runtime.log_dir),
        *(str(path) for path in config.prompt.files),
    )


def loggable_argv(argv: list[str], delivery: str) -> list[str]:
    # The prompt may be long and private; the event names the program and its flags only.
    return redact_argv([*argv[:-1], "<prompt>"] if delivery == "argv" else argv)
