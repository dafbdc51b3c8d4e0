"""The waiting child's side of the gate: `python -I -S gatekeeper.py GATE_FD [--landlock] [PROCS]`.

It joins its round's cgroup (PROCS is that cgroup's cgroup.procs) and says so, waits for the
program to run (argv, environment, stdin and output descriptors, and a Landlock ruleset when
the agent is confined) and execs it. When the gate closes first (the supervisor died before
recording it) it exits, running nothing. Only built-in modules: it starts once per round, so
it must start fast, and nothing of the supervisor's memory is in here. Landlock therefore
comes as a ruleset the supervisor built (landlock.py) and one raw system call made here
through `_ctypes`; `--landlock` loads that while the child waits.
"""

import _signal  # type: ignore[import-not-found]  # `signal` without its enums: starts faster
import _socket
import errno
import fcntl
import os
import sys
from _collections_abc import Callable  # loaded with `os` already: costs nothing
from _struct import Struct

# Payload bytes; counts of paths, argv, env entries; landlock_restrict_self flags.
HEADER = Struct("!QIIII")
FIRST_CHUNK = 4096  # the descriptors travel with the first bytes of the payload
PLACED = b"P"
PRELOAD_LANDLOCK = "--landlock"
GATE_CLOSED_EXIT = 0
EXEC_FAILED_EXIT = 127
HIGH_FD = 10
SYS_LANDLOCK_RESTRICT_SELF = 446  # the same number on every architecture
PR_SET_NO_NEW_PRIVS = 38
_INT = Struct("i")
Calls = tuple[Callable[..., int], Callable[..., int], Callable[[], int]]


class Received:
    """The program to run, as the supervisor sent it."""

    def __init__(self, fds: list[int], fields: list[bytes], counts: tuple[int, ...]) -> None:
        n_paths, n_argv, _n_env, self.landlock_flags = counts
        self.stdin_fd, self.out_fd = fds[0], fds[1]
        self.ruleset_fd = fds[2] if len(fds) == 3 else None
        self.cwd, rest = fields[0], fields[1:]
        self.paths, self.argv = rest[:n_paths], rest[n_paths : n_paths + n_argv]
        self.env = dict(e.split(b"=", 1) for e in rest[n_paths + n_argv :] if b"=" in e)


def encode(
    paths: list[bytes], argv: list[bytes], env: list[bytes], cwd: bytes, landlock_flags: int = 0
) -> bytes:
    """The payload `receive` decodes. NUL never occurs in a path, an argument or env entry."""
    body = b"\0".join([cwd, *paths, *argv, *env])
    return HEADER.pack(len(body), len(paths), len(argv), len(env), landlock_flags) + body


def receive(gate: _socket.socket) -> Received | None:
    """The program and descriptors as the supervisor sent them; None if it did not."""
    first, ancillary, _flags, _addr = gate.recvmsg(FIRST_CHUNK, _socket.CMSG_SPACE(3 * _INT.size))
    fds = [
        _INT.unpack_from(data, i)[0]
        for level, kind, data in ancillary
        if (level, kind) == (_socket.SOL_SOCKET, _socket.SCM_RIGHTS)
        for i in range(0, len(data) - len(data) % _INT.size, _INT.size)
    ]
    if not first or len(fds) not in (2, 3):
        return None
    data = bytearray(first)
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        chunk = gate.recv(1 << 16)
        if not chunk:
            return None
        data += chunk
    size, *counts = HEADER.unpack_from(data)
    fields = bytes(data[HEADER.size : HEADER.size + size]).split(b"\0")
    return Received(fds, fields, tuple(counts))


def main(gate_fd: int, procs: str | None, preload_landlock: bool = False) -> None:
    # The interpreter ignores SIGPIPE and SIGXFSZ and catches SIGINT; exec would keep an
    # ignored signal ignored for the agent.
    for signum in (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGINT):
        _signal.signal(signum, _signal.SIG_DFL)
    # Whatever the supervisor inherited without close-on-exec stops here, not in the agent;
    # the gate itself closes at exec, and that end-of-file tells the supervisor it happened.
    os.closerange(3, gate_fd)
    os.closerange(gate_fd + 1, os.sysconf("SC_OPEN_MAX"))
    os.set_inheritable(gate_fd, False)
    gate = _socket.socket(fileno=gate_fd)
    try:
        gate.sendall(PLACED if procs is None else _move_self(procs))
        # While the supervisor gets the program ready: not in the way of an exec, nor of
        # a caller waiting for the child to be placed.
        calls = _preload() if preload_landlock else None
        received = receive(gate)
    except OSError:
        received = None  # the supervisor went away (reset, broken pipe)
    if received is None:
        os._exit(GATE_CLOSED_EXIT)
    step = b"setup"
    try:
        stdin_fd, out_fd = (
            fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
            for fd in (received.stdin_fd, received.out_fd)
        )
        for fd in (received.stdin_fd, received.out_fd):
            os.close(fd)  # received without close-on-exec: the agent must not inherit them
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        step = b"chdir"
        os.chdir(received.cwd)
        if received.ruleset_fd is not None:
            step = b"confine"
            try:
                calls = calls or load_landlock()
            except Exception as exc:  # the agent must not run: say why it does not
                raise OSError(errno.ENOSYS, f"cannot load ctypes: {exc}") from exc
            restrict_self(calls, received.ruleset_fd, received.landlock_flags)
            os.close(received.ruleset_fd)
        step = b"exec"
        raise exec_first(received.paths, received.argv, received.env)
    except Exception as exc:  # whatever stops the exec is reported, never taken for an exit
        code = exc.errno if isinstance(exc, OSError) else None
        if code is None:
            code = errno.EINVAL if isinstance(exc, ValueError) else errno.EIO
        try:  # noqa: SIM105 -- contextlib is not a built-in module
            gate.sendall(b"%s:%d" % (step, code))
        except OSError:
            pass  # the supervisor went away: it learns nothing either way
    os._exit(EXEC_FAILED_EXIT)


def _move_self(procs: str) -> bytes:
    try:
        fd = os.open(procs, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")  # "0" is the writer: all of it moves, before any exec
        finally:
            os.close(fd)
    except OSError as exc:
        return b"E%d" % (exc.errno or errno.EIO)
    return PLACED


def load_landlock() -> Calls:
    """`syscall`, `prctl` and `get_errno`: `ctypes` without its Python layer (1 ms, not 7)."""
    import _ctypes  # noqa: PLC0415 -- only a confined agent's child needs it

    class Long(_ctypes._SimpleCData):  # type: ignore[type-arg]  # not subscriptable at runtime
        _type_ = "l"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Long

    libc = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]  # None: this program
    syscall = Function(_ctypes.dlsym(libc, "syscall"))
    prctl = Function(_ctypes.dlsym(libc, "prctl"))
    return syscall, prctl, _ctypes.get_errno


def _preload() -> Calls | None:
    try:
        return load_landlock()
    except Exception:  # loaded again where confining reports why it cannot
        return None


def restrict_self(calls: Calls, ruleset_fd: int, flags: int) -> None:
    """Put this process, so the program it execs and all that starts, in the ruleset's domain."""
    syscall, prctl, get_errno = calls
    if syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset_fd, flags) == 0:
        return
    code = get_errno()
    # Without CAP_SYS_ADMIN (anyone but root) the kernel wants no_new_privs first, so only
    # then is it set: setuid and file-capability programs run without their privileges.
    if code == errno.EPERM:
        granted = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
        if granted and syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset_fd, flags) == 0:
            return
        code = get_errno()
    raise OSError(code, os.strerror(code))


def exec_first(paths: list[bytes], argv: list[bytes], env: dict[bytes, bytes]) -> OSError:
    """Exec the first path that works; the error to report when none does."""
    found = OSError(errno.ENOENT, os.strerror(errno.ENOENT))
    for path in paths:
        try:
            os.execve(path, argv, env)  # noqa: S606 -- argv, never a shell
        except OSError as exc:
            # Like execvpe: a missing PATH entry is no reason to stop looking, and a real
            # error (EACCES) found on the way is worth more than a later "not found".
            if found.errno in (errno.ENOENT, errno.ENOTDIR):
                found = exc
    return found


if __name__ == "__main__":
    options = sys.argv[2:]
    preload = options[:1] == [PRELOAD_LANDLOCK]
    if preload:
        options = options[1:]
    main(int(sys.argv[1]), options[0] if options else None, preload)
