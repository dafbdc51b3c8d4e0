"""The waiting child's side of the gate, run as `python -I -S gatekeeper.py GATE_FD [PROCS]`.

It joins its round's cgroup (PROCS is that cgroup's cgroup.procs) and says so, waits for the
program to run (argv, environment, stdin and output descriptors) and execs it. When the
gate closes first (the supervisor died before recording it) it exits, running nothing.
Only built-in modules: it starts once per round, so it must start fast, and nothing of the
supervisor's memory is in here.
"""

import _signal  # type: ignore[import-not-found]  # `signal` without its enums: starts faster
import _socket
import errno
import fcntl
import os
import sys
from _struct import Struct

HEADER = Struct("!QIII")  # payload bytes; counts of paths, argv, env entries
FIRST_CHUNK = 4096  # the two descriptors travel with the first bytes of the payload
PLACED = b"P"
GATE_CLOSED_EXIT = 0
EXEC_FAILED_EXIT = 127
HIGH_FD = 10
_INT = Struct("i")


def encode(paths: list[bytes], argv: list[bytes], env: list[bytes], cwd: bytes) -> bytes:
    """The payload `receive` decodes. NUL never occurs in a path, an argument or env entry."""
    body = b"\0".join([cwd, *paths, *argv, *env])
    return HEADER.pack(len(body), len(paths), len(argv), len(env)) + body


def receive(
    gate: _socket.socket,
) -> tuple[list[int], list[bytes], list[bytes], dict[bytes, bytes], bytes] | None:
    """(descriptors, paths, argv, env, cwd) as the supervisor sent them; None if it did not."""
    first, ancillary, _flags, _addr = gate.recvmsg(FIRST_CHUNK, _socket.CMSG_SPACE(2 * _INT.size))
    fds = [
        _INT.unpack_from(data, i)[0]
        for level, kind, data in ancillary
        if (level, kind) == (_socket.SOL_SOCKET, _socket.SCM_RIGHTS)
        for i in range(0, len(data) - len(data) % _INT.size, _INT.size)
    ]
    if not first or len(fds) != 2:
        return None
    data = bytearray(first)
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        chunk = gate.recv(1 << 16)
        if not chunk:
            return None
        data += chunk
    size, n_paths, n_argv, _n_env = HEADER.unpack_from(data)
    fields = bytes(data[HEADER.size : HEADER.size + size]).split(b"\0")
    cwd, rest = fields[0], fields[1:]
    paths, argv = rest[:n_paths], rest[n_paths : n_paths + n_argv]
    env = dict(entry.split(b"=", 1) for entry in rest[n_paths + n_argv :] if b"=" in entry)
    return fds, paths, argv, env, cwd


def main(gate_fd: int, procs: str | None) -> None:
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
        received = receive(gate)
    except OSError:
        received = None  # the supervisor went away (reset, broken pipe)
    if received is None:
        os._exit(GATE_CLOSED_EXIT)
    fds, paths, argv, env, cwd = received
    step = b"setup"
    try:
        stdin_fd, out_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD) for fd in fds)
        for fd in fds:
            os.close(fd)  # received without close-on-exec: the agent must not inherit them
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        step = b"chdir"
        os.chdir(cwd)
        step = b"exec"
        raise exec_first(paths, argv, env)
    except OSError as exc:
        gate.sendall(b"%s:%d" % (step, exc.errno or errno.EIO))
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
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
