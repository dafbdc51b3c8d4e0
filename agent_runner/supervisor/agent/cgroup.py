"""Round cgroups (cgroup v2): where they live, putting the agent in one, killing it as a unit.

The agent joins `round-NNNNNN` before it execs and the round ends with `cgroup.kill`, so
nothing the round started survives it however it forked. Where no cgroup v2 subtree is
writable, `locate` raises CgroupUnavailable and rounds fall back to the subreaper.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import AgentRunnerError

ROUND_NAME = re.compile(r"^round-\d{6}$")
PROJECT_PREFIX = "agent-runner-"
SUPERVISOR_LEAF = "supervisor"
# Controllers whose numbers round_end reports (memory.peak) or that bound a round (pids).
WANTED_CONTROLLERS = ("memory", "pids")
# How long one wait for `populated 0` lasts before the kill is written again.
KILL_RECHECK_S = 1.0


class CgroupUnavailable(AgentRunnerError):
    """No cgroup v2 subtree this process may create round cgroups in; str() says why."""


@dataclass(frozen=True)
class Usage:
    """What one round cost, read from its cgroup; None where the kernel does not account it."""

    memory_peak_bytes: int | None
    cpu_s: float | None


NO_USAGE = Usage(None, None)


def cgroup2_mount(mountinfo: str) -> tuple[Path, str] | None:
    """The first cgroup2 mount in /proc/self/mountinfo text: (mount point, root it shows)."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return Path(_unescape(fields[4])), _unescape(fields[3])
    return None


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from /proc/self/cgroup text (the `0::` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def cgroup_dir(mount: Path, root: str, own: str) -> Path | None:
    """Where `own` is under `mount`, which shows the hierarchy from `root` down; None if outside."""
    relative = os.path.relpath(own, root)
    if relative == os.curdir:
        return mount
    if relative.startswith(os.pardir):
        return None
    return mount / relative


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


class RoundCgroups:
    """The folder this serve creates its round cgroups in."""

    def __init__(self, base: Path, *, mount: Path, owned_base: bool) -> None:
        self.base = base
        self.mount = mount
        # A per-project folder inside a shared cgroup is ours to remove when serve stops.
        self._owned_base = owned_base

    def create(self, round_no: int) -> RoundCgroup:
        """A fresh, empty `round-NNNNNN`; whatever a dead serve left under that name goes first."""
        path = self.base / f"round-{round_no:06d}"
        if path.exists():
            RoundCgroup(path).kill()
            RoundCgroup(path).remove()
        try:
            path.mkdir(mode=0o755)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create {path}: {exc.strerror}") from exc
        return RoundCgroup(path)

    def recorded(self, raw: object, key: str) -> RoundCgroup | None:
        """The round cgroup state.json names, if it is one this project may kill."""
        if not isinstance(raw, str):
            return None
        path = Path(raw)
        if os.path.realpath(path) != raw or not ROUND_NAME.match(path.name):
            return None
        if not path.is_relative_to(self.mount):
            return None  # a plain folder with files named like a cgroup's must never be "killed"
        # Ours are directly in this serve's base, or in this project's folder of a serve that
        # ran from another (shared) cgroup: never anything else a damaged state.json names.
        if path.parent != self.base and path.parent.name != PROJECT_PREFIX + key:
            return None
        return RoundCgroup(path) if (path / "cgroup.kill").exists() else None

    def leftovers(self) -> list[RoundCgroup]:
        """Round cgroups a dead serve left in the base."""
        try:
            names = sorted(os.listdir(self.base))
        except OSError:
            return []
        return [RoundCgroup(self.base / n) for n in names if ROUND_NAME.match(n)]

    def close(self) -> None:
        """Remove the per-project folder once no round cgroup is left in it."""
        if self._owned_base:
            with contextlib.suppress(OSError):
                self.base.rmdir()


class RoundCgroup:
    """One round's cgroup."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def procs(self) -> Path:
        """The file a process writes "0" into to join this cgroup."""
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> list[int]:
        """SIGKILL everything in the cgroup and wait until it is empty; the pids it held."""
        held = self.pids()
        events = _open_events(self.path)
        if events is None:
            return held  # already removed
        try:
            poller = select.poll()
            # cgroup.events raises POLLPRI when `populated` changes: no polling loop needed.
            poller.register(events, select.POLLPRI)
            while _populated(events):
                try:
                    # Atomic against forks in flight, unlike signalling the listed pids.
                    _write(self.path / "cgroup.kill", "1")
                except FileNotFoundError:
                    break
                except OSError as exc:
                    raise CgroupUnavailable(f"cannot kill {self.path}: {exc.strerror}") from exc
                poller.poll(KILL_RECHECK_S * 1000)
        finally:
            os.close(events)
        return held

    def usage(self) -> Usage:
        """Peak memory and CPU time of everything that ran in this cgroup."""
        peak: int | None = None
        with contextlib.suppress(OSError, ValueError):
            peak = int((self.path / "memory.peak").read_text())
        return Usage(peak, _cpu_s(self.path / "cpu.stat"))

    def remove(self) -> None:
        """rmdir the cgroup and any the round made inside it, once `kill` has emptied them.

        One that cannot go (still busy) stays for the next start's sweep of leftovers.
        """
        for parent, children, _files in os.walk(self.path, topdown=False):
            for child in children:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(parent, child))
        with contextlib.suppress(OSError):
            self.path.rmdir()


@dataclass(frozen=True)
class Placement:
    """Where round cgroups would go: `base` inside `here` (this process's cgroup)."""

    mount: Path
    here: Path
    base: Path

    @property
    def shared(self) -> bool:
        """True when `here` holds other processes, so rounds get a per-project folder."""
        return self.base != self.here


def place(key: str) -> Placement:
    """Where this process's round cgroups would go, looking only; CgroupUnavailable says why not.

    A cgroup of our own (systemd `Delegate=yes`) gets the rounds directly; one shared with
    other processes (a login session, the root cgroup) gets a folder `agent-runner-<key>`.
    """
    try:
        mount = cgroup2_mount(Path("/proc/self/mountinfo").read_text())
        own = own_cgroup(Path("/proc/self/cgroup").read_text())
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read /proc/self: {exc.strerror}") from exc
    if mount is None:
        raise CgroupUnavailable("no cgroup v2 hierarchy is mounted")
    if own is None:
        raise CgroupUnavailable("this process is in no cgroup v2 cgroup")
    here = cgroup_dir(*mount, own)
    if here is None or not here.is_dir():
        raise CgroupUnavailable(f"this process's cgroup {own} is not visible under {mount[0]}")
    exclusive = here != mount[0] and _holds_only_me(here)
    base = here if exclusive else here / f"{PROJECT_PREFIX}{key}"
    if not (here / "cgroup.kill").exists() and here != mount[0]:
        raise CgroupUnavailable("this kernel has no cgroup.kill (Linux 5.14 or later)")
    if not os.access(here, os.W_OK) or not os.access(here / "cgroup.procs", os.W_OK):
        raise CgroupUnavailable(f"no permission to create cgroups and move processes in {here}")
    return Placement(mount[0], here, base)


def locate(key: str) -> RoundCgroups:
    """The round cgroups of this serve, their folder created; CgroupUnavailable says why not."""
    placement = place(key)
    if placement.shared:
        try:
            placement.base.mkdir(mode=0o755, exist_ok=True)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create {placement.base}: {exc.strerror}") from exc
        _enable_controllers(placement.base)
    else:
        _delegate_controllers(placement.here)
    if not (placement.base / "cgroup.kill").exists():
        raise CgroupUnavailable("this kernel has no cgroup.kill (Linux 5.14 or later)")
    return RoundCgroups(placement.base, mount=placement.mount, owned_base=placement.shared)


def _holds_only_me(path: Path) -> bool:
    try:
        return (path / "cgroup.procs").read_text().split() == [str(os.getpid())]
    except OSError:
        return False


def _delegate_controllers(own: Path) -> None:
    """Give round cgroups memory and pids accounting where our own cgroup has them to give.

    A cgroup that hands controllers to its children may hold no process itself, so serve
    first moves into a `supervisor` leaf. Without this, rounds still work; round_end then
    reports memory_peak_bytes as null.
    """
    wanted = [c for c in _controllers(own / "cgroup.controllers") if c in WANTED_CONTROLLERS]
    missing = [c for c in wanted if c not in _controllers(own / "cgroup.subtree_control")]
    if not missing:
        return
    leaf = own / SUPERVISOR_LEAF
    with contextlib.suppress(OSError):
        leaf.mkdir(mode=0o755, exist_ok=True)
        _write(leaf / "cgroup.procs", str(os.getpid()))
        _write(own / "cgroup.subtree_control", " ".join(f"+{c}" for c in missing))


def _enable_controllers(base: Path) -> None:
    # A folder of ours holds no process, so it may pass on whatever its parent gave it.
    wanted = [c for c in _controllers(base / "cgroup.controllers") if c in WANTED_CONTROLLERS]
    if wanted:
        with contextlib.suppress(OSError):
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))


def _controllers(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _cpu_s(path: Path) -> float | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "usage_usec":
                return round(int(value) / 1e6, 3)
    except (OSError, ValueError):
        pass
    return None


def _open_events(path: Path) -> int | None:
    try:
        return os.open(path / "cgroup.events", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _populated(fd: int) -> bool:
    try:
        text = os.pread(fd, 256, 0).decode("ascii", "replace")
    except OSError as exc:
        if exc.errno == errno.ENODEV:  # the cgroup was removed under us
            return False
        raise
    return "populated 1" in text


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
