"""Run one agent in its own session, wait on it without polling, and bring its group down;
and the short helper commands serve runs beside it (the operator's `[notify] command`).

The agent's process exists first, held at a gate (gate.py) until the caller has recorded it;
only then does the agent's program start. What escapes the group (setsid, double fork) is
`strays.py`'s and `cgroup.py`'s business.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from agent_runner.errors import AgentRunnerError
from agent_runner.supervisor.agent.gate import Confine, ExecFailure, GatedChild
from agent_runner.supervisor.agent.program import interpreter_problem
from agent_runner.supervisor.agent.strays import process_start_ticks

TRANSCRIPT_MODE = 0o600


class SpawnError(AgentRunnerError):
    """The agent could not be started: missing executable or work_dir, or an unsafe transcript."""


@dataclass(frozen=True)
class AgentExit:
    """How one agent run ended."""

    exit_code: int | None
    signal: str | None
    cause: str
    duration_s: float


def agent_environment(
    agent_env: Mapping[str, str],
    *,
    round_no: int,
    log_dir: Path,
    transcript: Path,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The agent's environment: inherited, then `[agent] env`, then the AGENT_RUNNER_* variables."""
    env = dict(os.environ if base is None else base)
    env.update(agent_env)
    env["AGENT_RUNNER_ROUND"] = str(round_no)
    env["AGENT_RUNNER_LOG_DIR"] = str(log_dir)
    env["AGENT_RUNNER_TRANSCRIPT"] = str(transcript)
    return env


def deliver_prompt(
    command: Sequence[str], prompt: str, delivery: Literal["stdin", "argv"]
) -> tuple[list[str], bytes | None]:
    """The argv and stdin bytes that hand `prompt` to the agent as configured."""
    if delivery == "argv":
        return [*command, prompt], None
    return list(command), prompt.encode()


def transcript_path(log_dir: Path, round_no: int) -> Path:
    """Where round `round_no` writes its stdout and stderr."""
    return log_dir / "rounds" / f"round-{round_no:06d}.log"


class AgentProcess:
    """One running agent: the leader of its own session and process group."""

    def __init__(self, pid: int, pidfd: int, start_ticks: int, started: float) -> None:
        self._pidfd = pidfd
        self._started = started
        self._ended: float | None = None
        self._returncode: int | None = None
        self.pid = pid
        self.pgid = pid
        self.start_ticks = start_ticks

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdin_data: bytes | None,
        transcript: Path,
        output: int | None = None,
        child: GatedChild | None = None,
        before_exec: Callable[[AgentProcess], None] = lambda _agent: None,
        confine: Confine | None = None,
    ) -> AgentProcess:
        """Start `argv` in a new session, stdout and stderr appended to `transcript`, or
        written to the descriptor `output` when given (a transcript relay's pipe).

        `child` is a gated child started ahead of time (a fresh one otherwise). It execs only
        once `before_exec` (recording its pid) has returned: the agent's program never runs
        unrecorded, and if this process dies first the child exits without running anything.
        With `confine` the program runs in that Landlock domain, or not at all.
        """
        if not argv:
            raise SpawnError("the agent command is empty")
        # Exec keeps the signal mask: an agent started with SIGTERM blocked could only be SIGKILLed.
        if signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []):
            raise SpawnError("SIGTERM is blocked in this thread; the agent would inherit that")
        out = open_transcript(transcript) if output is None else os.dup(output)
        if stdin_data is None:
            stdin_r, stdin_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
        else:
            stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        started = time.monotonic()
        try:
            agent, gated = cls._launch(child, started, before_exec, landlock=confine is not None)
            failure = gated.start(
                argv, cwd=cwd, env=env, stdin_fd=stdin_r, out_fd=out, confine=confine
            )
        except BaseException:
            _close(stdin_w)
            raise
        finally:
            os.close(out)
            os.close(stdin_r)
        if failure is not None:
            _close(stdin_w)
            agent.wait(None)
            raise SpawnError(_describe_spawn_failure(argv, cwd, env, failure))
        if stdin_data is not None:
            # A thread, because a prompt larger than the pipe buffer blocks until the agent reads.
            threading.Thread(
                target=_feed, args=(stdin_w, stdin_data), name=f"stdin-{agent.pid}", daemon=True
            ).start()
        return agent

    @classmethod
    def _launch(
        cls,
        child: GatedChild | None,
        started: float,
        before_exec: Callable[[AgentProcess], None],
        *,
        landlock: bool,
    ) -> tuple[AgentProcess, GatedChild]:
        """Watch the gated child and run `before_exec`: the agent, its program not started yet."""
        if child is None:
            try:
                child = GatedChild.spawn(landlock=landlock)
            except OSError as exc:
                raise SpawnError(f"cannot start the agent: {exc.strerror}") from exc
        try:
            # The child is unreaped, so its pid cannot have been recycled yet.
            pidfd = os.pidfd_open(child.pid)
        except OSError as exc:
            child.abandon()
            raise SpawnError(f"cannot watch the agent: pidfd_open: {exc.strerror}") from exc
        ticks = process_start_ticks(child.pid)
        if ticks is None:
            os.close(pidfd)
            child.abandon()
            raise SpawnError("cannot watch the agent: /proc is not readable")
        agent = cls(child.pid, pidfd, ticks, started)
        try:
            before_exec(agent)
        except BaseException:
            os.close(pidfd)
            child.abandon()
            raise
        return agent, child

    def wait(self, timeout_s: float | None, wake_fd: int | None = None) -> bool:
        """Block until the agent exits (True), or until the timeout or `wake_fd` is readable."""
        if self._returncode is not None:
            return True
        with selectors.DefaultSelector() as selector:
            selector.register(self._pidfd, selectors.EVENT_READ)
            if wake_fd is not None:
                selector.register(wake_fd, selectors.EVENT_READ)
            ready = {key.fd for key, _ in selector.select(timeout_s)}
        if self._pidfd in ready:
            self._reap()
            return True
        return False

    def terminate(self, grace_s: float, wake_fd: int | None = None) -> None:
        """SIGTERM the group, wait `grace_s` (cut short by `wake_fd`), SIGKILL the group, reap."""
        if self._returncode is None:
            self._signal_group(signal.SIGTERM)
            self.wait(grace_s, wake_fd)
        # If the leader is already reaped, surviving members still pin the group id, so it
        # cannot have been recycled; with no members left the signal finds nobody.
        self._signal_group(signal.SIGKILL)
        self.wait(None)

    def result(self, cause_override: str | None = None) -> AgentExit:
        """The exit record; "timeout", "idle" and "stopped" are the caller's `cause_override`."""
        if self._returncode is None or self._ended is None:
            raise RuntimeError(f"agent {self.pid} has not been reaped yet")
        code = self._returncode
        duration = self._ended - self._started
        if code < 0:
            name = _signal_name(-code)
            return AgentExit(None, name, cause_override or f"signal:{name}", duration)
        cause = "clean" if code == 0 else "error"
        return AgentExit(code, None, cause_override or cause, duration)

    def _reap(self) -> None:
        _, status = os.waitpid(self.pid, 0)
        self._ended = time.monotonic()
        self._returncode = os.waitstatus_to_exitcode(status)
        os.close(self._pidfd)

    def _signal_group(self, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signum)


@dataclass(frozen=True)
class HelperResult:
    """How a helper command ended, with the start of what it printed."""

    exit_code: int | None
    signal: str | None
    output: bytes  # stdout and stderr together, at most the `max_output` asked for
    timed_out: bool


class HelperCommand:
    """A short command in its own session: fed its stdin, its output capped, its group killed
    once it exits or at the deadline. `finish` blocks, so it runs on a thread of its own."""

    def __init__(self, popen: subprocess.Popen[bytes], pidfd: int, stdin_data: bytes) -> None:
        self._popen = popen
        self._pidfd = pidfd
        self._stdin_data = stdin_data
        self.pid = popen.pid

    @classmethod
    def start(
        cls, argv: Sequence[str], *, stdin_data: bytes, cwd: Path, env: Mapping[str, str]
    ) -> HelperCommand:
        """Start `argv`; SpawnError (with the reason) when it cannot be started."""
        try:
            popen = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        except ValueError as exc:  # a NUL byte in the command
            raise SpawnError(f"cannot start {argv[0]!r}: {exc}") from exc
        except OSError as exc:
            step = (
                "exec"
                if exc.filename is not None and os.fspath(exc.filename) == argv[0]
                else "chdir"
            )
            failure = ExecFailure(step, exc)
            raise SpawnError(_describe_spawn_failure(argv, cwd, env, failure)) from exc
        try:
            pidfd = os.pidfd_open(popen.pid)
        except OSError as exc:
            _abandon(popen)
            raise SpawnError(f"cannot watch {argv[0]!r}: pidfd_open: {exc.strerror}") from exc
        return cls(popen, pidfd, stdin_data)

    def finish(self, timeout_s: float, max_output: int) -> HelperResult:
        """Feed stdin, read output, wait for the exit or the deadline; kill the group, reap."""
        proc = self._popen
        assert proc.stdin is not None
        assert proc.stdout is not None
        os.set_blocking(proc.stdin.fileno(), False)
        os.set_blocking(proc.stdout.fileno(), False)
        pending, kept = memoryview(self._stdin_data), bytearray()
        deadline = time.monotonic() + timeout_s
        exited = False
        with selectors.DefaultSelector() as selector:
            selector.register(self._pidfd, selectors.EVENT_READ, "exit")
            selector.register(proc.stdout, selectors.EVENT_READ, "output")
            selector.register(proc.stdin, selectors.EVENT_WRITE, "input")
            while not exited and (remaining := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(remaining):
                    if key.data == "exit":
                        exited = True
                    elif key.data == "output" and not _read_into(proc.stdout, kept, max_output):
                        selector.unregister(proc.stdout)
                    elif key.data == "input":
                        pending = _write_from(proc.stdin.fileno(), pending)
                        if not pending:
                            selector.unregister(proc.stdin)
                            proc.stdin.close()
        # What it started in its group goes with it, at its exit as at the deadline: a
        # helper's work is done when it exits.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        # Popen must never waitpid this pid again: by then it may belong to someone else.
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        os.close(self._pidfd)
        # What is still in the pipe; BlockingIOError: something that left the group holds it.
        with contextlib.suppress(OSError):
            while chunk := os.read(proc.stdout.fileno(), 65536):
                kept += chunk[: max(0, max_output - len(kept))]
        proc.stdin.close()
        proc.stdout.close()
        name = _signal_name(-code) if code < 0 else None
        return HelperResult(None if code < 0 else code, name, bytes(kept), not exited)


def _abandon(popen: subprocess.Popen[bytes]) -> None:
    """Kill and reap a helper that cannot be watched."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGKILL)
    popen.wait()


def _write_from(fd: int, pending: memoryview) -> memoryview:
    """Write what the pipe takes now; an empty view once all is written or the reader left."""
    try:
        while pending:
            pending = pending[os.write(fd, pending) :]
    except BlockingIOError:
        return pending
    except OSError:
        return pending[:0]  # it closed its stdin or died: what it did not read it did not want
    return pending


def _read_into(pipe: IO[bytes], kept: bytearray, max_output: int) -> bool:
    """Read what the pipe holds now into `kept` (up to `max_output`); False at EOF."""
    try:
        chunk = os.read(pipe.fileno(), 65536)
    except BlockingIOError:
        return True
    except OSError:
        return False
    # Beyond the cap it is read and dropped, so a chatty helper never blocks on us.
    kept += chunk[: max(0, max_output - len(kept))]
    return bool(chunk)


def open_transcript(path: Path, access: int = os.O_WRONLY | os.O_APPEND) -> int:
    """Open (creating, mode 0600) the transcript `path` for `access`, refusing a symlinked
    folder or file, anything that is not a regular file and a hard link to another file's
    name (what the agent may plant where the transcripts go); SpawnError says why."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        reason = "it is a symlink" if path.parent.is_symlink() else exc.strerror
        raise SpawnError(f"refusing the transcript folder {path.parent}: {reason}") from exc
    # O_NONBLOCK so that a FIFO planted at the path fails at once instead of hanging us.
    flags = access | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path.name, flags, TRANSCRIPT_MODE, dir_fd=parent)
    except OSError as exc:
        reason = "it is a symlink" if exc.errno == errno.ELOOP else exc.strerror
        raise SpawnError(f"refusing the transcript {path}: {reason}") from exc
    finally:
        os.close(parent)
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink > 1:
        os.close(fd)
        reason = (
            "not a regular file"
            if not stat.S_ISREG(found.st_mode)
            else f"it has {found.st_nlink} hard links (it is also another file)"
        )
        raise SpawnError(f"refusing the transcript {path}: {reason}")
    os.set_blocking(fd, True)
    return fd


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def _feed(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass  # The agent closed its stdin or died: whatever it did not read, it did not want.
    finally:
        os.close(fd)


def _describe_spawn_failure(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], failure: ExecFailure
) -> str:
    exc = failure.error
    if failure.step == "exec":
        if exc.errno == errno.E2BIG:
            return (
                f"cannot start {argv[0]!r}: the arguments are too long "
                "(deliver the prompt on stdin)"
            )
        if exc.errno == errno.ENOENT:
            # exec says ENOENT for a missing #! interpreter too: name the file that is missing.
            script = shutil.which(argv[0], path=env.get("PATH")) if "/" not in argv[0] else None
            found = Path(script) if script else cwd / argv[0]
            problem = interpreter_problem(found, env.get("PATH")) if found.is_file() else None
            if problem is not None:
                return f"cannot start {argv[0]!r}: {problem}"
            return f"cannot start {argv[0]!r}: not found (is it installed and on PATH?)"
        return f"cannot start {argv[0]!r}: {exc.strerror}"
    if failure.step == "confine":
        return f"cannot start {argv[0]!r}: Landlock refused to confine it: {exc.strerror}"
    return f"cannot start {argv[0]!r} in {cwd}: {exc.strerror}"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"
