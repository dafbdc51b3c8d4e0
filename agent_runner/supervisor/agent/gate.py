"""A child started ahead of time and held before exec: the parent learns its pid, records it,
then hands it the program to run (argv, environment, stdio) over the gate and lets it go.

The child is a small isolated interpreter running gatekeeper.py; if the parent dies first,
its end of the gate sees end-of-file and it exits without running anything. Python's
subprocess cannot do this: it returns only after the exec.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent_runner.supervisor.agent import gatekeeper

CHILD_FD = 3
# Whatever the supervisor handles or ignores (or was started ignoring, like nohup's SIGHUP),
# the child starts with every standard signal at its default and none blocked.
CHILD_DEFAULT_SIGNALS = tuple(
    s
    for s in signal.valid_signals()
    if s < signal.SIGRTMIN and s not in (signal.SIGKILL, signal.SIGSTOP)
)


@dataclass(frozen=True)
class Confine:
    """A Landlock ruleset the child restricts itself with just before exec, and the flags."""

    ruleset_fd: int
    flags: int


@dataclass(frozen=True)
class ExecFailure:
    """Why the child could not start the program: the step (`chdir`, `exec`) and the error."""

    step: str  # "chdir", "confine" or "exec"
    error: OSError


class GatedChild:
    """A child in its own session, waiting at its gate for the program to run."""

    def __init__(self, pid: int, gate: socket.socket) -> None:
        self.pid = pid
        self._gate = gate
        self._ready: OSError | bool | None = False  # False until the child's report is read

    @classmethod
    def spawn(cls, into: Path | None = None, *, landlock: bool = False) -> GatedChild:
        """Start the child; with `into` (a cgroup's cgroup.procs) it first moves itself there.

        The move may wait out an RCU grace period: the child waits for it, not the caller.
        `landlock`: it loads what confining its agent takes while it waits (any child can).
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = [sys.executable, "-I", "-S", "-B", gatekeeper.__file__, str(CHILD_FD)]
        if landlock:
            argv.append(gatekeeper.PRELOAD_LANDLOCK)
        if into is not None:
            argv.append(os.fsdecode(into))
        try:
            pid = os.posix_spawn(
                sys.executable,
                argv,
                # Only its marker: the environment the program gets comes with `start`.
                {k: v for k, v in os.environ.items() if k.startswith("AGENT_RUNNER_")},
                # Every other descriptor of ours is close-on-exec; this one is its gate.
                file_actions=[(os.POSIX_SPAWN_DUP2, theirs.fileno(), CHILD_FD)],
                setsid=True,
                setsigmask=(),
                setsigdef=CHILD_DEFAULT_SIGNALS,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(pid, ours)

    def placed(self) -> OSError | None:
        """Block until the child is ready (in its cgroup if asked): None, or why the move failed."""
        if self._ready is False:
            report = self._gate.recv(16)
            if report in (gatekeeper.PLACED, b""):  # b"": it died, and its wait will say how
                self._ready = None
            else:
                code = int(report[1:]) if report[1:].isdigit() else errno.EIO
                self._ready = OSError(code, os.strerror(code))
        return self._ready if isinstance(self._ready, OSError) else None

    def start(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdin_fd: int,
        out_fd: int,
        confine: Confine | None = None,
    ) -> ExecFailure | None:
        """Run `argv`; block until it has exec'd (None) or the child reported why it could not.

        `stdin_fd` becomes its stdin, `out_fd` its stdout and stderr. With `confine` the child
        restricts itself with that Landlock ruleset first, or does not exec at all.
        """
        payload = gatekeeper.encode(
            [os.fsencode(p) for p in _candidates(argv[0], env)],
            [os.fsencode(a) for a in argv],
            [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()],
            os.fsencode(cwd),
            landlock_flags=0 if confine is None else confine.flags,
        )
        fds = [stdin_fd, out_fd] if confine is None else [stdin_fd, out_fd, confine.ruleset_fd]
        chunk = gatekeeper.FIRST_CHUNK
        try:
            self.placed()
            socket.send_fds(self._gate, [payload[:chunk]], fds)
            if payload[chunk:]:
                self._gate.sendall(payload[chunk:])
        except OSError:
            pass  # it is gone: dead at the gate, or already reporting why exec failed
        try:
            # The child's end is close-on-exec: end-of-file means the program runs.
            report = b"".join(iter(lambda: self._gate.recv(256), b""))
        except OSError:
            report = b""  # it died at the gate: its wait says how
        finally:
            self._gate.close()
        if not report:
            return None
        step, _, number = report.partition(b":")
        code = int(number) if number.isdigit() else errno.EIO
        return ExecFailure(step.decode("ascii", "replace"), OSError(code, os.strerror(code)))

    def abandon(self) -> None:
        """Kill and reap the child, which has not exec'd (unreaped, so the pid is still ours)."""
        self._gate.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _candidates(program: str, env: Mapping[str, str]) -> list[str]:
    """The paths exec tries for `program`, searched in the child's PATH like execvpe does."""
    if "/" in program:
        return [program]
    return [os.path.join(d, program) for d in os.get_exec_path(dict(env))]
