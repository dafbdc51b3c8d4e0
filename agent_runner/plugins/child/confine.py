"""Child side of the trampoline: confine a freshly forked child in order, then hand it to `runner`.

`confine_and_run` never returns. Confinement is complete (Landlock, seccomp, no privileges)
before the request is read, and a required part that cannot be applied refuses the call.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import resource
import signal
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent_runner.plugins import wire
from agent_runner.plugins.child.runner import OOM_ENVELOPE, run_request

_T = TypeVar("_T")

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
NOBODY = 65534
REQUEST_FD, RESULT_FD, RULESET_FD = 0, 3, 4
ADDRESS_SPACE_BYTES = 1 << 30
FILE_SIZE_BYTES = 16 << 20
OPEN_FILES = 64
# Without seccomp (which refuses clone: one task per call) a call may grow to this many tasks.
TASKS_WITHOUT_SECCOMP = 64
THREADS_AS_NOBODY = 128
CLONE_NEWUSER = 0x10000000
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Landlock access rights (stable kernel ABI values).
_FS_READ_FILE, _FS_READ_DIR = 1 << 2, 1 << 3
_FS_EXECUTE = 1 << 0
_FS_MAKE_CHAR, _FS_MAKE_SOCK, _FS_MAKE_BLOCK, _FS_IOCTL_DEV = 1 << 6, 1 << 9, 1 << 11, 1 << 15
_FS_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)
_SYS_LANDLOCK_ADD_RULE = 445  # the same number on every architecture
_RULE_PATH_BENEATH = 1


class ConfinementError(Exception):
    """A part of the confinement this call was required to have could not be applied."""


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_char_p))


@dataclass
class Prebuilt:
    """Everything the fork server prepares once so that each child only applies it."""

    landlock_abi: int = 0
    handled_fs: int = 0
    handled_net: int = 0
    scoped: int = 0
    base_root_fds: list[tuple[int, bool]] = field(default_factory=list)
    base_rules: list[Any] = field(default_factory=list)
    read_roots: list[str] = field(default_factory=list)
    seccomp_bpf: bytes = b""
    notes: list[str] = field(default_factory=list)
    is_root: bool = False
    server_pid: int = 0
    stdlib_paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CallConfig:
    """The per-call part the parent sends with the descriptors."""

    scratch: str
    read_roots: tuple[str, ...]
    fs: bool
    net: bool
    scope: bool
    seccomp: bool
    best_effort: bool
    timeout_s: float


_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [
    ctypes.c_int,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
    ctypes.c_ulong,
]
_libc.prctl.restype = ctypes.c_int


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    if _libc.prctl(option, arg2, arg3, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def set_parent_death_signal(expected_parent: int) -> None:
    """SIGKILL this process when its parent dies; exit now if it already has."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # The parent may have died before prctl took effect: then we were already reparented.
    if os.getppid() != expected_parent:
        os._exit(70)


def detach(prebuilt: Prebuilt) -> None:
    """A freshly forked child's first step: a session of its own, and death with the server."""
    os.setsid()
    set_parent_death_signal(prebuilt.server_pid)


def confine_and_run(
    prebuilt: Prebuilt, cfg: CallConfig, fds: list[int], base_ruleset: int | None
) -> None:
    """The life of one call's child after `detach`, in the required order; exits the process.

    `base_ruleset` is a Landlock ruleset the server filled for this child alone: the read-only
    roots, the scratch and the call's read roots. Without one the child builds it.
    """
    # Lift the received descriptors above the slots they are moved into, whatever their numbers.
    request_fd, result_fd, stderr_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for source, target in ((request_fd, 0), (stderr_fd, 1), (stderr_fd, 2), (result_fd, 3)):
        os.dup2(source, target)
    applied = {"fs": False, "net": False, "scope": False, "seccomp": False}
    problems: list[str] = []
    try:
        # The server's environment is already the allow-list (forkserver.main). One item at
        # a time: update() runs the ABC machinery, which dirties dozens of shared pages.
        os.environ["HOME"] = cfg.scratch
        os.environ["TMPDIR"] = cfg.scratch
        os.chdir(cfg.scratch)
        ruleset = None
        if cfg.fs or cfg.best_effort:
            ruleset = _attempt(
                problems, "landlock", lambda: _build_ruleset(prebuilt, cfg, base_ruleset)
            )
        if ruleset is not None:
            os.dup2(ruleset, RULESET_FD)
        os.closerange(RULESET_FD + (ruleset is not None), 1 << 20)
        _set_limits(cfg.timeout_s)
        _become_unprivileged(prebuilt, bound_tasks=not cfg.seccomp)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if ruleset is not None:
            _attempt(problems, "landlock", lambda: _restrict_self(prebuilt, applied))
        if cfg.seccomp or (cfg.best_effort and prebuilt.seccomp_bpf):
            _attempt(problems, "seccomp", lambda: _load_seccomp(prebuilt.seccomp_bpf, applied))
        for part in ("fs", "net", "scope", "seccomp"):
            if getattr(cfg, part) and not applied[part]:
                problems.append(f"{part} restriction was required but not applied")
    except (OSError, ConfinementError) as exc:
        # Descriptors, limits and privileges are never best effort.
        _finish(wire.encode_refusal(f"process setup failed: {exc}"))
    if problems and not cfg.best_effort:
        _finish(wire.encode_refusal("confinement failed: " + "; ".join(problems)))
    sys.dont_write_bytecode = True
    sys.path[:] = prebuilt.stdlib_paths
    sys.path_importer_cache.clear()
    notes = [*prebuilt.notes, *problems]
    try:
        request = wire.decode_request(_read_request())
    except (wire.WireError, ValueError) as exc:
        _finish(wire.encode_refusal(f"bad request: {exc}"))
    # Plugin code may run from here on: whatever it writes comes after this mark.
    _write_result(wire.CONFINED_MARK)
    try:
        envelope = run_request(request, applied, prebuilt.landlock_abi, notes)
    except MemoryError:
        envelope = OOM_ENVELOPE
    _finish(envelope)


def _attempt(problems: list[str], what: str, step: Callable[[], _T]) -> _T | None:
    try:
        return step()
    except (OSError, ConfinementError) as exc:
        problems.append(f"{what}: {exc}")
    except Exception as exc:
        problems.append(f"{what}: {type(exc).__name__}: {exc}")
    return None


def new_base_ruleset(prebuilt: Prebuilt) -> int:
    """A Landlock ruleset holding the read-only roots every child gets; one per child."""
    import py_landlock as ll  # noqa: PLC0415 - pre-imported by the fork server

    if not prebuilt.base_rules:
        read_dir = _FS_READ_FILE | _FS_READ_DIR
        prebuilt.base_rules = [
            ll.PathBeneathAttr(read_dir if is_dir else _FS_READ_FILE, fd)
            for fd, is_dir in prebuilt.base_root_fds
        ]
    attr = ll.RulesetAttr(prebuilt.handled_fs, prebuilt.handled_net, prebuilt.scoped)
    ruleset = int(ll.create_ruleset(attr))
    try:
        for rule in prebuilt.base_rules:
            _add_rule(ruleset, rule)
    except OSError:
        os.close(ruleset)
        raise
    return ruleset


def add_call_rules(prebuilt: Prebuilt, ruleset: int, cfg: CallConfig) -> None:
    """Add one call's own rules to its ruleset: the scratch read-write, its read roots read-only.

    Paths are opened without a later lookup by name: the rights follow what was opened.
    """
    import py_landlock as ll  # noqa: PLC0415 - pre-imported by the fork server

    read_dir = _FS_READ_FILE | _FS_READ_DIR
    writable = prebuilt.handled_fs & ~(
        _FS_EXECUTE | _FS_MAKE_CHAR | _FS_MAKE_BLOCK | _FS_MAKE_SOCK | _FS_IOCTL_DEV
    )
    for path, wanted in [(cfg.scratch, writable)] + [(p, read_dir) for p in cfg.read_roots]:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            # Directory-only rights on a file rule make landlock_add_rule fail with EINVAL.
            rights = wanted if stat.S_ISDIR(os.fstat(fd).st_mode) else wanted & _FS_FILE_RIGHTS
            _add_rule(ruleset, ll.PathBeneathAttr(rights, fd))
        finally:
            os.close(fd)


def _add_rule(ruleset: int, rule: Any) -> None:
    # One raw syscall per rule: py-landlock's wrapper doubles the cost of a few hundred rules.
    if _libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0):
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_add_rule: {os.strerror(err)}")


def _build_ruleset(prebuilt: Prebuilt, cfg: CallConfig, base: int | None) -> int | None:
    """The call's whole ruleset: the server's, or built here while every root can be opened."""
    if prebuilt.landlock_abi < 1:
        if cfg.fs:
            raise ConfinementError("Landlock is not available")
        return None
    if base is not None:
        return base
    ruleset = new_base_ruleset(prebuilt)
    try:
        add_call_rules(prebuilt, ruleset, cfg)
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def _restrict_self(prebuilt: Prebuilt, applied: dict[str, bool]) -> None:
    import py_landlock as ll  # noqa: PLC0415 - pre-imported by the fork server

    ll.restrict_self(ll.RulesetFd(RULESET_FD), None)
    os.close(RULESET_FD)
    applied["fs"] = True
    applied["net"] = bool(prebuilt.handled_net)
    applied["scope"] = bool(prebuilt.scoped)


def _set_limits(timeout_s: float) -> None:
    cpu_s = int(timeout_s) + 2
    limits = [
        (resource.RLIMIT_AS, ADDRESS_SPACE_BYTES),
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_FSIZE, FILE_SIZE_BYTES),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
        (resource.RLIMIT_CORE, 0),
    ]
    for which, value in limits:
        resource.setrlimit(which, (value, value + 1 if which == resource.RLIMIT_CPU else value))
    # A write past RLIMIT_FSIZE should fail with EFBIG, not kill the call with SIGXFSZ.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _become_unprivileged(prebuilt: Prebuilt, *, bound_tasks: bool) -> None:
    """As root, become nobody; without seccomp, also get a task count of the call's own."""
    if prebuilt.is_root:
        _drop_privileges()
    if bound_tasks:
        _bound_tasks(prebuilt.is_root)
    # Not dumpable: no other process of this uid (under a user's supervisor, the agent) may
    # ptrace the child or open its /proc files.
    _prctl(PR_SET_DUMPABLE, 0)
    # Changing credentials clears the parent-death signal: set it again.
    set_parent_death_signal(prebuilt.server_pid)


def _bound_tasks(is_root: bool) -> None:
    """Bound a call that may create tasks (no seccomp) to a count of its own, shared with no one.

    RLIMIT_NPROC counts the tasks of a uid in a user namespace: in a fresh one that maps only
    this uid, the count starts at this task. The namespace is made before the limit is
    lowered (its parent-level limit is the one in force at creation) and every capability it
    grants is dropped at once.
    """
    try:
        _own_user_namespace()
    except OSError as exc:
        # The host refuses user namespaces: say so where the operator sees the call's output.
        os.write(2, f"agent-runner: no per-call task count: {exc.strerror}\n".encode())
        if is_root:
            resource.setrlimit(resource.RLIMIT_NPROC, (THREADS_AS_NOBODY, THREADS_AS_NOBODY))
        return
    resource.setrlimit(resource.RLIMIT_NPROC, (TASKS_WITHOUT_SECCOMP, TASKS_WITHOUT_SECCOMP))


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _own_user_namespace() -> None:
    """Enter a user namespace mapping only this uid and gid, keeping no capability in it.

    OSError: the host refuses the namespace. Once inside, any failure is ConfinementError:
    a task left there half set up (unmapped, with the namespace's capabilities) never runs.
    """
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(CLONE_NEWUSER) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWUSER): {os.strerror(err)}")
    try:
        # After a switch from root the task is not dumpable and its /proc files belong to
        # root. Dumpable just long enough to open them (no other process may attach to it
        # meanwhile at tiers without Landlock): an open descriptor stays writable after.
        _prctl(PR_SET_DUMPABLE, 1)
        names = ("uid_map", "setgroups", "gid_map")
        try:
            fds = [os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC) for name in names]
        finally:
            _prctl(PR_SET_DUMPABLE, 0)
        for fd, line in zip(fds, (f"{uid} {uid} 1", "deny", f"{gid} {gid} 1"), strict=True):
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        # unshare gave this task every capability inside the new namespace: keep none.
        _drop_bounding_set()
        header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        if _libc.capset(ctypes.byref(header), ctypes.byref((_CapData * 2)())) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"capset: {os.strerror(err)}")
    except OSError as exc:
        raise ConfinementError(f"user namespace setup failed: {exc}") from exc


def _drop_bounding_set() -> None:
    for cap in range(64):
        try:
            _prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:
            # EINVAL past the kernel's last capability: every one it has is dropped.
            if exc.errno == errno.EINVAL and cap > 0:
                break
            raise


def _drop_privileges() -> None:
    _drop_bounding_set()
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    if os.getresuid() != (NOBODY, NOBODY, NOBODY) or os.geteuid() == 0:
        raise ConfinementError("could not switch to the unprivileged uid")


def _load_seccomp(bpf: bytes, applied: dict[str, bool]) -> None:
    if not bpf:
        raise ConfinementError("no seccomp filter was built")
    prog = _SockFprog(len(bpf) // 8, bpf)
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog))
    applied["seccomp"] = True


def _read_request() -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(REQUEST_FD, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > wire.MAX_REQUEST_BYTES:
            _finish(wire.encode_refusal("request too large"))
        chunks.append(chunk)


def _write_result(data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(RESULT_FD, view) :]
    except OSError:
        pass  # the parent reports a missing result; nothing else to do here


def _finish(data: bytes) -> None:
    _write_result(data)
    for stream in (sys.stdout, sys.stderr):
        # The plugin may have closed or replaced them; its output is not ours to save.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(0)
