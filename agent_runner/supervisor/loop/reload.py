"""Live edits (SPEC §5.1a): re-read the config before each round and apply, defer or refuse."""

from __future__ import annotations

import os
import time
from dataclasses import fields, replace

from agent_runner.config import Config, load_config
from agent_runner.errors import ConfigError
from agent_runner.events import Emit
from agent_runner.supervisor.boot.checks import RELOAD_CHECKS, require

# These only take effect when serve restarts: they decide which process, lock and logs we own,
# and what the agent may write (an agent able to edit the config must not widen that itself).
RESTART_ONLY = (
    "plugins",
    "runtime.work_dir",
    "runtime.log_dir",
    "runtime.round_cgroup",
    "agent.confine",
    "agent.writable",
)
# A file changed within this long of being read is read again next time: a second change
# inside the timestamps' granularity could leave its size, times and inode as they were.
RECENT_S = 1.0
SECTIONS = (
    *("agent", "prompt", "runtime", "breakers", "backoff", "vcs", "budget", "notify"),
    "plugins",
)


def keep_restart_only(fresh: Config, running: Config) -> Config:
    """`fresh` with every RESTART_ONLY section or key put back to its running value."""
    for name in RESTART_ONLY:
        section, _, key = name.partition(".")
        if not key:
            fresh = replace(fresh, **{section: getattr(running, section)})
            continue
        kept = replace(getattr(fresh, section), **{key: getattr(getattr(running, section), key)})
        fresh = replace(fresh, **{section: kept})
    return fresh


class ConfigWatcher:
    """Holds the running config and the last file version seen."""

    def __init__(self, config: Config, emit: Emit) -> None:
        self.running = config
        self.seen = config
        self.emit = emit
        # The file as it was when last parsed (device, inode, size, times), and its config.
        self._parsed: tuple[tuple[int, ...], Config] | None = None
        # The last error reported per source, so each distinct one is reported once.
        self.reported: dict[str, str | None] = {"config": None, "prompt": None}

    def refresh(self) -> Config:
        """The config for the next round."""
        try:
            fresh = self._load()
            require(fresh, RELOAD_CHECKS)  # also what changes outside the file (PATH)
        except ConfigError as exc:
            self.report_failure("config", str(exc))
            return self.running
        self.reported["config"] = None
        changed = changed_keys(self.seen, fresh)
        self.seen = fresh
        if not changed:
            return self.running
        deferred = [key for key in changed if key.startswith(RESTART_ONLY)]
        applied = [key for key in changed if key not in deferred]
        kept = keep_restart_only(fresh, self.running)
        if fresh.runtime.stop_file == fresh.runtime.log_dir / "STOP":
            # Derived from a log_dir that only a restart applies: it stays with the running one.
            runtime = replace(kept.runtime, stop_file=kept.runtime.log_dir / "STOP")
            kept = replace(kept, runtime=runtime)
        self.running = kept
        if applied:
            self.emit("config_reloaded", changed=applied)
        if deferred:
            self.emit("config_reload_deferred", changed=deferred)
        return self.running

    def _load(self) -> Config:
        """The file's config, parsed again only when the file may have changed since."""
        try:
            info = os.stat(self.running.path)  # before reading: a change after it is seen
        except OSError:
            info = None  # load_config says why
        file = None
        # The kernel's clock, not serve's: it is what stamped the file.
        if info is not None and time.time() - info.st_ctime > RECENT_S:
            file = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if file is not None and self._parsed is not None and self._parsed[0] == file:
            return self._parsed[1]
        self._parsed = None
        fresh = load_config(self.running.path)
        if file is not None:
            self._parsed = (file, fresh)
        return fresh

    def report_failure(self, source: str, reason: str) -> None:
        """`config_reload_failed` once per distinct error of `source`, not once per round."""
        if reason != self.reported[source]:
            self.reported[source] = reason
            self.emit("config_reload_failed", reason=reason)

    def clear_failure(self, source: str) -> None:
        """`source` is readable again, so its next error is news."""
        self.reported[source] = None


def changed_keys(old: Config, new: Config) -> list[str]:
    """Dotted `table.key` names whose values differ."""
    changed = []
    for section in SECTIONS:
        before, after = getattr(old, section), getattr(new, section)
        for item in fields(before):
            if getattr(before, item.name) != getattr(after, item.name):
                changed.append(f"{section}.{item.name}")
    return changed
