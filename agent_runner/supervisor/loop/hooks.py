"""Where the loop meets plugin hooks: the view each family gets, and what the answers change.

`agent_runner.plugins.parent.hooks` calls the hooks and checks their answers; this module builds
their views from the loop's own data and turns the answers into waits, intents and findings.
Views are plain data: names of environment variables, never their values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent_runner.config import Config
from agent_runner.events import Emit
from agent_runner.parsers import TAIL_BYTES, Transient
from agent_runner.parsers.tail import last_lines, read_tail
from agent_runner.plugins import DirtyIntent
from agent_runner.plugins.parent.hooks import Hooks
from agent_runner.supervisor.agent.process import deliver_prompt, transcript_path
from agent_runner.supervisor.dirty import Decide, DirtyView, intent_problem
from agent_runner.supervisor.loop.policy import merge_transient
from agent_runner.supervisor.loop.round import RoundResult, loggable_argv, round_environment

# A skip is followed by at least this wait, so a plugin that skips forever cannot spin the loop.
SKIP_MIN_WAIT_S = 1.0
# Cut from the parser's tail (parsers.TAIL_BYTES), so it cannot be longer.
TRANSCRIPT_TAIL_BYTES = min(64 * 1024, TAIL_BYTES)


class HandlerUnavailable(Exception):
    """The configured dirty handler gave no usable intent; the builtin stashes instead."""


@dataclass(frozen=True)
class SpawnWait:
    """A defer or skip: how long the loop waits before the gates run again, and why."""

    seconds: float
    action: str
    hook: str | None
    reason: str

    def detail(self, now: float) -> dict[str, Any]:
        """What state.json (and so peek) shows while the loop waits."""
        return {
            "action": self.action,
            "until": now + self.seconds,
            "hook": self.hook,
            "reason": self.reason,
        }


def spawn_view(config: Config, number: int, last_round: dict[str, Any] | None) -> dict[str, Any]:
    """What a spawn hook sees before round `number`: argv redacted, env names only."""
    delivery = config.agent.prompt_delivery
    argv, _ = deliver_prompt(config.agent.command, "", delivery)
    return {
        "round": number,
        "last_round": last_round,
        "argv": loggable_argv(argv, delivery),
        "env_names": sorted(round_environment(config, number)),
        "max_defer_s": config.plugins.max_defer_s,
    }


class SpawnGate:
    """Asks the spawn hooks before each spawn and reports defers, skips and resumptions."""

    def __init__(self, hooks: Hooks, emit: Emit) -> None:
        self.hooks = hooks
        self.emit = emit
        self._deferred: int | None = None

    def ask(
        self, config: Config, number: int, last_round: dict[str, Any] | None
    ) -> SpawnWait | None:
        """None to spawn round `number` now; otherwise the wait before asking again."""
        if not self.hooks.has("spawn"):
            return None  # the common case costs no view
        verdict = self.hooks.before_spawn(spawn_view(config, number, last_round))
        if verdict.action == "proceed":
            if self._deferred == number:
                self.emit("round_resumed", round=number)
            self._deferred = None
            return None
        if verdict.action == "defer":
            self._deferred = number
            self.emit(
                "round_deferred", round=number, defer_s=verdict.defer_s, reason=verdict.reason
            )
            return SpawnWait(verdict.defer_s, "defer", verdict.hook, verdict.reason)
        self.emit("round_skipped", round=number, reason=verdict.reason)
        wait_s = max(config.runtime.restart_delay_s, SKIP_MIN_WAIT_S)
        return SpawnWait(wait_s, "skip", verdict.hook, verdict.reason)


def dirty_decider(hooks: Hooks, config: Config) -> Decide | None:
    """The configured dirty handler as `secure_tree` calls it; None for the builtin."""
    name = config.vcs.dirty_handler
    if name == "builtin" or not hooks.can_decide_dirty(name):
        return None

    def decide(view: DirtyView) -> DirtyIntent:
        answer = hooks.decide_dirty(
            name,
            {
                "round": view.round,
                "exit_cause": view.exit_cause,
                "files": list(view.files),
                "work_dir": view.work_dir,
            },
            # Read-only, and for this call only: no other hook ever sees the work tree.
            read_roots=(Path(view.work_dir),),
            problem=lambda intent: intent_problem(intent, view.files),
        )
        if isinstance(answer, str):
            raise HandlerUnavailable(answer)
        return answer

    return decide


def observe_round(
    hooks: Hooks, config: Config, result: RoundResult, emit: Emit, now: float
) -> RoundResult:
    """Run the round observers; the result with an observer's transient when the policy takes it."""
    if not hooks.has("observe"):
        return result
    tail = _observed_tail(config, result)
    observed = hooks.after_round(
        {
            "round": result.number,
            "exit_cause": result.exit.cause,
            "exit_code": result.exit.exit_code,
            "duration_s": round(result.exit.duration_s, 3),
            "transcript_tail": tail.decode("utf-8", "replace"),
        }
    )
    reported = [Transient(o.classification, o.reset_at, f"reported by {o.hook}") for o in observed]
    found = result.findings.transient
    chosen = merge_transient(found, reported, now)
    if chosen is found or chosen is None:
        return result
    emit(
        "transient_error_detected",
        round=result.number,
        classification=chosen.classification,
        reset_at=chosen.reset_at,
        detail=chosen.detail,
    )
    return replace(result, findings=replace(result.findings, transient=chosen))


def _observed_tail(config: Config, result: RoundResult) -> bytes:
    """The transcript's last TRANSCRIPT_TAIL_BYTES, cut from what the parser read if it did."""
    if result.transcript_tail is not None:
        return last_lines(result.transcript_tail, TRANSCRIPT_TAIL_BYTES)
    try:
        return read_tail(
            transcript_path(config.runtime.log_dir, result.number), TRANSCRIPT_TAIL_BYTES
        )
    except OSError:
        return b""
