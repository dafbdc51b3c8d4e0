"""`[notify]`: the operator's own command, run with one event as JSON on its stdin.

It is not a plugin: the operator wrote it into agent-runner.toml, so serve runs it unconfined,
with serve's environment. It never blocks the loop: each run waits on a thread of its own,
at most NOTIFY_TIMEOUT_S, after which its process group is killed. A kind runs at most once
a minute; a run that fails is `notify_failed{about, reason}` (`about`: the kind it was for).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_runner.config import Config, NotifyConfig
from agent_runner.events import Emit, encodable
from agent_runner.supervisor.agent.process import HelperCommand, HelperResult, SpawnError
from agent_runner.supervisor.loop.round import SUPERVISOR_ONLY_ENV

NOTIFY_TIMEOUT_S = 5.0
OUTPUT_MAX_BYTES = 4096
MIN_INTERVAL_S = 60.0
REASON_MAX_CHARS = 200
DRAIN_SLACK_S = 2.0  # past the timeout: the kill and the reap
# Every event line starts with its time and kind (EventLog._stamp): no JSON parse per event.
_KIND = re.compile(r'^\{"ts":"[^"]*","event":"([^"]+)"')


@dataclass
class Notifications:
    """Runs `[notify] command` for the events it is told of; one thread per run in flight."""

    config: NotifyConfig
    emit: Emit
    cwd: Path
    env: dict[str, str]
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _running: dict[int, threading.Thread] = field(default_factory=dict)
    _last_run: dict[str, float] = field(default_factory=dict)
    _counts: dict[str, int] = field(
        default_factory=lambda: {"sent": 0, "failed": 0, "rate_limited": 0}
    )
    _last: dict[str, Any] | None = None

    @classmethod
    def for_config(cls, config: Config, emit: Emit) -> Notifications:
        env = {k: v for k, v in os.environ.items() if k not in SUPERVISOR_ONLY_ENV}
        env["AGENT_RUNNER_WORK_DIR"] = str(config.runtime.work_dir)
        env["AGENT_RUNNER_LOG_DIR"] = str(config.runtime.log_dir)
        return cls(config.notify, emit, config.path.parent, env)

    def configure(self, config: NotifyConfig) -> None:
        """A live edit of [notify]: from the next event on."""
        self.config = config

    def offer(self, line: str) -> None:
        """The event log's tap: `line` is one event exactly as written."""
        match = _KIND.match(line)
        if match is None or not self.config.command or match[1] not in self.config.on:
            return
        kind = match[1]
        now = self.monotonic()
        with self._lock:
            last = self._last_run.get(kind)
            if last is not None and now - last < MIN_INTERVAL_S:
                self._counts["rate_limited"] += 1
                return
            self._last_run[kind] = now
        env = {**self.env, "AGENT_RUNNER_EVENT": kind}
        try:
            helper = HelperCommand.start(
                self.config.command, stdin_data=(line + "\n").encode(), cwd=self.cwd, env=env
            )
        except SpawnError as exc:
            self._failed(kind, str(exc))
            return
        thread = threading.Thread(
            target=self._wait, args=(kind, helper), name=f"notify-{kind}", daemon=True
        )
        with self._lock:
            self._running[helper.pid] = thread
        thread.start()

    def running_pids(self) -> tuple[int, ...]:
        """The commands still running: leftover reaping after a round must spare them."""
        with self._lock:
            return tuple(self._running)

    def drain(self) -> None:
        """Before serve exits: let the runs in flight finish (each is bounded by its timeout)."""
        with self._lock:
            threads = list(self._running.values())
        for thread in threads:
            thread.join(NOTIFY_TIMEOUT_S + DRAIN_SLACK_S)

    def state(self) -> dict[str, Any]:
        """For state.json and peek: what is configured, the counts, the last run."""
        with self._lock:
            return {
                "command": list(self.config.command),
                "on": list(self.config.on),
                **self._counts,
                "last": self._last,
            }

    def _wait(self, kind: str, helper: HelperCommand) -> None:
        try:
            result = helper.finish(NOTIFY_TIMEOUT_S, OUTPUT_MAX_BYTES)
        except OSError as exc:  # the pipes or the pidfd failed under us: the run is lost
            self._failed(kind, f"lost track of it: {exc.strerror or exc}")
            return
        finally:
            with self._lock:
                del self._running[helper.pid]
        problem = _problem(result)
        if problem is None:
            with self._lock:
                self._counts["sent"] += 1
                self._last = {"kind": kind, "at": self.wall(), "ok": True, "reason": None}
        else:
            self._failed(kind, problem)

    def _failed(self, kind: str, reason: str) -> None:
        reason = reason[:REASON_MAX_CHARS]
        with self._lock:
            self._counts["failed"] += 1
            self._last = {"kind": kind, "at": self.wall(), "ok": False, "reason": reason}
        # Outside the lock: the event log calls `offer` again from inside `emit`.
        self.emit("notify_failed", about=kind, reason=reason)


def _problem(result: HelperResult) -> str | None:
    said = _last_line(result.output)
    said = f": {said}" if said else ""
    if result.timed_out:
        return f"no exit within {NOTIFY_TIMEOUT_S:g}s; its process group was killed{said}"
    if result.signal is not None:
        return f"killed by {result.signal}{said}"
    if result.exit_code != 0:
        return f"exit {result.exit_code}{said}"
    return None


def _last_line(output: bytes) -> str:
    lines = [line.strip() for line in output.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    return encodable(lines[-1]) if lines else ""
