"""Processes that outlive their round: find every descendant, freeze it, kill it, reap it.

Call `become_subreaper` once at boot: only then do processes that escape the agent's group
(setsid, double fork) stay descendants that `reap_leftovers` can find.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
# Every process a serve starts carries one of these set to its log_dir: the agent (SPEC §5.1)
# and, through serve's own environment, each helper (git). A successor finds them by it.
MARKER_VARIABLES = ("AGENT_RUNNER_LOG_DIR", "AGENT_RUNNER_SERVE_LOG_DIR")
MAX_ENVIRON_BYTES = 4 * 1024 * 1024


@contextlib.contextmanager
def marked_environment(log_dir: Path) -> Iterator[None]:
    """While serve runs, every process it starts inherits its marker (MARKER_VARIABLES)."""
    name = MARKER_VARIABLES[1]
    before = os.environ.get(name)
    os.environ[name] = str(log_dir)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def become_subreaper() -> None:
    """Adopt every orphaned descendant of this process instead of letting init have it."""
    import ctypes  # noqa: PLC0415 -- once, at serve's boot; peek and status read ticks only

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    entry = _read_stat(pid)
    return None if entry is None else entry.start_ticks


def reap_leftovers(*, keep: Collection[int] = ()) -> list[int]:
    """SIGKILL and reap every descendant except `keep` and theirs; returns the killed pids.

    Assumes no other code is running a subprocess of its own meanwhile (a git call would be
    killed and reaped under it): the loop calls this between rounds only, after the agent
    itself has been reaped.
    """
    root, spared = os.getpid(), set(keep)
    killed: set[int] = set()
    while True:
        held = _freeze(
            lambda: set(_descendants(root, spared)),
            lambda entry, found: entry.ppid == root or entry.ppid in found,
        )
        if not held:
            return sorted(killed)
        killed.update(_kill_all(held))
        # Killed children are zombies now; their own children were reparented to us and
        # show up on the next pass.
        for pid in held:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


@dataclass(frozen=True)
class Orphans:
    """How to recognise what a serve that died uncleanly left running.

    `pgid` with `leader_start_ticks`: its agent's group and session, from state.json.
    `markers` with `since_ticks`: `NAME=value` environment entries its agents and helpers
    carry, in processes started no earlier than that serve.
    """

    pgid: int | None = None
    leader_start_ticks: int | None = None
    markers: tuple[bytes, ...] = ()
    since_ticks: int | None = None


def kill_orphans(orphans: Orphans) -> list[int]:
    """Kill every process `orphans` recognises (start times prove none is a recycled pid)."""
    me = os.getpid()
    group = _group_to_match(orphans, me)
    markers = set(orphans.markers)
    since = orphans.since_ticks
    if group is None and (since is None or not markers):
        return []

    def belongs(entry: _Stat, _found: Collection[int] = ()) -> bool:
        if entry.pid == me:
            return False
        if (
            group is not None
            and entry.start_ticks >= group[1]
            and group[0] in (entry.pgrp, entry.sid)
        ):
            return True
        return since is not None and entry.start_ticks >= since and _carries(entry.pid, markers)

    held = _freeze(lambda: {e.pid for e in _scan_proc() if belongs(e)}, belongs)
    return sorted(_kill_all(held))


def _group_to_match(orphans: Orphans, me: int) -> tuple[int, int] | None:
    """(pgid, leader start) when the recorded group may still exist, else None."""
    pgid, ticks = orphans.pgid, orphans.leader_start_ticks
    if pgid is None or ticks is None or pgid <= 1 or pgid in (os.getpgid(0), os.getsid(0), me):
        return None
    leader = _read_stat(pgid)
    if leader is not None and leader.start_ticks != ticks:
        # A live group or session pins its id, so another process under that pid means
        # both are gone: matching on the number now could only hit strangers.
        return None
    return pgid, ticks


def _carries(pid: int, markers: set[bytes]) -> bool:
    """Whether the process's environment holds one of `markers` (`NAME=value`, exactly)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read(MAX_ENVIRON_BYTES).split(b"\0")
    except OSError:
        return False  # gone, a kernel thread, or another user's
    return not markers.isdisjoint(entries)


@dataclass(frozen=True)
class _Stat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    sid: int
    start_ticks: int


@dataclass(frozen=True)
class _Held:
    pidfd: int
    was_alive: bool


def _read_stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if b")" not in raw:
        return None  # read as the process was being released
    # The command name may contain spaces and parentheses; the fields start after the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return _Stat(
        pid, fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    )


def _scan_proc() -> Iterable[_Stat]:
    for name in os.listdir("/proc"):
        if name.isdigit() and (entry := _read_stat(int(name))) is not None:
            yield entry


def _children_from_files(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return kids
    for tid in tids:
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),
            open(f"/proc/{pid}/task/{tid}/children", "rb") as f,
        ):
            kids.extend(int(x) for x in f.read().split())
    return kids


def _children_reader() -> Callable[[int], list[int]]:
    if _HAVE_CHILDREN_FILES:
        return _children_from_files
    table: dict[int, list[int]] = {}
    for entry in _scan_proc():
        table.setdefault(entry.ppid, []).append(entry.pid)
    return lambda pid: table.get(pid, [])


# Reading only our own subtree keeps reaping cheap on a busy host (CONFIG_PROC_CHILDREN).
_HAVE_CHILDREN_FILES = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def _descendants(root: int, spared: Collection[int]) -> dict[int, int]:
    children = _children_reader()
    found: dict[int, int] = {}
    stack = [root]
    while stack:
        parent = stack.pop()
        for pid in children(parent):
            if pid not in spared and pid not in found:
                found[pid] = parent
                stack.append(pid)
    return found


def _freeze(
    find: Callable[[], set[int]], belongs: Callable[[_Stat, Collection[int]], bool]
) -> dict[int, _Held]:
    """SIGSTOP everything `find` reports until a rescan finds nobody new; pid -> pidfd."""
    held: dict[int, _Held] = {}
    rejected: set[int] = set()
    while True:
        found = find()
        new = found - held.keys() - rejected
        if not new:
            return held
        for pid in new:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            entry = _read_stat(pid)
            # Checked after pidfd_open: from here on the fd names this process even if
            # the pid is recycled, so a signal can never reach a stranger.
            if entry is None or not belongs(entry, found):
                os.close(pidfd)
                rejected.add(pid)
                continue
            try:
                # A stopped process cannot fork, so once all are stopped a rescan sees the
                # whole tree; killing instead would race a fork loop.
                signal.pidfd_send_signal(pidfd, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                os.close(pidfd)
                rejected.add(pid)
                continue
            held[pid] = _Held(pidfd, entry.state != "Z")


def _kill_all(held: Mapping[int, _Held]) -> list[int]:
    """SIGKILL every held process and block until each has exited; returns those that were alive."""
    try:
        with selectors.DefaultSelector() as selector:
            for item in held.values():
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(item.pidfd, signal.SIGKILL)
                selector.register(item.pidfd, selectors.EVENT_READ)
            # No timeout: SIGKILL always wins except against a kernel stuck in I/O, and then
            # the systemd watchdog is the right judge, not a guess here.
            while selector.get_map():
                for key, _ in selector.select():
                    selector.unregister(key.fd)
    finally:
        for item in held.values():
            os.close(item.pidfd)
    return [pid for pid, item in held.items() if item.was_alive]
