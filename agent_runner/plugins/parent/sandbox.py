"""The trampoline's public face: `Sandbox` starts and probes the fork server, runs calls.

Nothing a child does can raise out of `Sandbox.call`: `classify` turns every outcome into a
`CallResult`. The pipes and deadlines of one call live in `forkclient`.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from agent_runner.errors import ConfinementUnavailable
from agent_runner.plugins import wire
from agent_runner.plugins.parent.forkclient import ForkServer, Mode, Outcome

Tier = Literal["full", "landlock", "seccomp", "none"]
Status = Literal["ok", "raised", "invalid_result", "timeout", "crash", "sandbox_kill", "oom"]
NOBODY = 65534
SELF_TEST_TIMEOUT_S = 5.0
SELF_TEST_OPERATIONS = (
    "read_outside",
    "write_outside",
    "read_parent_environ",
    "tcp_connect",
    "unix_socket",
    "signal_parent",
    "ptrace",
    "exec",
    "fork",
    "chmod",
)
TIMEZONE_DATA = ("/usr/share/zoneinfo", "/etc/localtime")
# What a call may leave in its scratch; the foreground cleanup stops past the entry budget.
MAX_SCRATCH_ENTRIES = 10_000
MAX_SCRATCH_BYTES = 64 << 20
# Removing the scratch is part of the call: it has until the call's deadline, and at least this.
MIN_CLEANUP_S = 0.1
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ProbeReport:
    """What a real confined child proved is enforced on this host."""

    tier: Tier
    landlock_abi: int
    fs: bool
    net: bool
    scope: bool
    seccomp: bool
    unconfined_reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """The report as plain JSON data."""
        return asdict(self)


@dataclass(frozen=True)
class CallRequest:
    """One hook call: the verified plugin files, the entry point, the hook and its view."""

    family: Literal["describe", "spawn", "dirty", "observe", "selftest", "probe"]
    sources: Mapping[str, bytes]
    entry: str
    hook: str | None
    view: Mapping[str, Any]
    read_roots: tuple[Path, ...] = ()


@dataclass(frozen=True)
class CallResult:
    """How a call ended; `value` is the validated JSON result when status is ok."""

    status: Status
    value: Any
    detail: str
    signal: str | None
    syscall: str | None
    stderr_tail: str


def classify(  # noqa: PLR0911 - one branch per distinguishable end of a call
    family: str, outcome: Outcome, timeout_s: float, *, seccomp: bool
) -> CallResult:
    """Turn what was observed of a child into a CallResult (pure).

    `seccomp` says whether the call ran under the filter, which refuses every signal-sending
    syscall: only then is a death by SIGSYS or SIGXCPU the kernel's verdict, not the plugin's.
    """
    stderr = outcome.stderr[-wire.MAX_STDERR_BYTES :].decode("utf-8", "replace")
    tail = wire.escape_text(stderr, multiline=True)[-wire.MAX_STDERR_BYTES :]

    def failed(status: Status, detail: str, sig: str | None = None) -> CallResult:
        return CallResult(status, None, wire.escape_text(detail), sig, None, tail)

    if outcome.timed_out:
        return failed("timeout", f"no result within {timeout_s:g} s")
    if outcome.server_died:
        return failed("crash", "the sandbox fork server died during the call")
    if outcome.oversized:
        return failed("invalid_result", f"result larger than {wire.MAX_RESULT_BYTES} bytes")
    status = outcome.wait_status if outcome.wait_status is not None else 0
    if os.WIFSIGNALED(status):
        name = _signal_name(os.WTERMSIG(status))
        if name == "SIGSYS" and seccomp:
            return failed("sandbox_kill", "killed by the seccomp filter", name)
        if name == "SIGXCPU" and seccomp:
            return failed("timeout", "CPU time limit reached", name)
        # Never "oom" from what the child printed: only the runner's own envelope says so.
        return failed("crash", f"killed by {name}", name)
    code = os.WEXITSTATUS(status)
    if outcome.result in (b"", wire.CONFINED_MARK):
        return failed("crash", f"exited with status {code} without a result")
    try:
        kind, value, detail = wire.parse_result(family, outcome.result)
    except wire.WireError as exc:
        return failed("invalid_result", str(exc)[:500])
    if kind == "ok" and code == 0:
        return CallResult("ok", value, "", None, None, tail)
    mapped: dict[str, Status] = {"raised": "raised", "invalid": "invalid_result", "oom": "oom"}
    if kind in mapped:
        return failed(mapped[kind], detail)
    if kind == "refused":
        return failed("crash", f"refused: {detail}")
    return failed("crash", f"exited with status {code}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Sandbox:
    """Runs plugin hook calls in confined children of an isolated fork server."""

    def __init__(
        self,
        mode: Mode,
        *,
        emit: Callable[..., None],
        hook_timeout_s: float = 10.0,
        scratch_root: Path | None = None,
    ) -> None:
        self._mode = mode
        self._emit = emit
        self._timeout_s = hook_timeout_s
        self._given_scratch_root = scratch_root
        self._scratch_root: Path | None = None
        # The next call's scratch, made while the previous call's child ran (mkdir can take
        # milliseconds on a busy disk): empty, and reachable by no child until it is handed out.
        self._spare: Path | None = None
        self._server: ForkServer | None = None
        # Until the probe says what this host enforces, "require" assumes everything is.
        self._enforce = dict.fromkeys(("fs", "net", "scope", "seccomp"), mode == "require")
        self._lock = threading.Lock()
        self._cleaners: list[threading.Thread] = []
        self.cleanup_notes: list[str] = []
        self._ids = itertools.count(1)
        self._restarts = 0
        self._server_dead: str | None = None
        self.report: ProbeReport | None = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> ProbeReport:
        """Start the fork server and probe what a real child gets; apply the mode's rule."""
        if self._server is not None and self.report is not None:
            return self.report
        self._scratch_root = self._make_scratch_root()
        self._server = ForkServer(self._mode, self._base_roots())
        # Calls are refused until `report` is set: none may run before the probe's verdict.
        report = self._probe()
        if self._mode != "off" and report.tier != "full":
            self._emit(
                "plugin_sandbox_degraded",
                requested=self._mode,
                achieved_tier=report.tier,
                reason=report.unconfined_reason,
            )
            if self._mode == "require":
                self.close()
                raise ConfinementUnavailable(
                    f'sandbox = "require" but this host only achieves tier {report.tier!r}: '
                    f"{report.unconfined_reason}"
                )
        self.report = report
        return report

    def call(self, request: CallRequest, timeout_s: float | None = None) -> CallResult:
        """Run one call in a fresh confined child; never raises for what the child does."""
        timeout = self._timeout_s if timeout_s is None else timeout_s
        with self._lock:
            if self.report is None:
                return CallResult("crash", None, "sandbox not started", None, None, "")
            return self._call_locked(request, timeout, best_effort=False)

    def server_pids(self) -> tuple[int, ...]:
        """The fork server's pid while it runs: a supervisor's stray sweep must spare it."""
        server = self._server
        return (server.process.pid,) if server is not None and server.alive() else ()

    def self_test(self) -> dict[str, bool]:
        """Try each forbidden operation in a confined child: operation -> blocked."""
        assert self._scratch_root is not None, "start() first"
        outside = self._scratch_root / "outside"
        outside.mkdir(mode=0o1777, exist_ok=True)
        outside.chmod(0o1777)
        canary = outside / "canary"
        canary.write_text("secret\n")
        canary.chmod(0o644)
        view = {"outside_file": str(canary), "parent_pid": os.getpid()}
        report = {}
        for operation in SELF_TEST_OPERATIONS:
            request = CallRequest("selftest", {}, "", operation, view)
            result = self.call(request, SELF_TEST_TIMEOUT_S)
            report[operation] = result.status == "sandbox_kill" or (
                result.status == "ok" and bool(result.value["blocked"])
            )
        self._note_failure("self-test directory", remove_tree(outside))
        return report

    def close(self) -> None:
        """Stop the fork server and remove scratch space; never raises for what a child left."""
        with self._lock:
            self.report = None
            if self._server is not None:
                self._server.stop()
                self._server = None
            for cleaner in self._cleaners:
                cleaner.join()
            self._cleaners.clear()
            if self._spare is not None:
                self._note_failure("spare scratch", remove_tree(self._spare))
                self._spare = None
            if self._scratch_root is not None and self._given_scratch_root is None:
                self._note_failure("scratch root", remove_tree(self._scratch_root))
                self._scratch_root = None

    def _probe(self) -> ProbeReport:
        assert self._server is not None
        if self._mode == "off":
            return ProbeReport("none", 0, False, False, False, False, "sandbox = off")
        request = CallRequest("probe", {}, "", None, {})
        with self._lock:
            result = self._call_locked(request, self._timeout_s, best_effort=True)
        if result.status != "ok":
            failure = f"the probe child failed: {result.status}: {result.detail}"
            return ProbeReport("none", 0, False, False, False, False, failure)
        value = result.value
        fs, seccomp = value["fs"], value["seccomp"]
        self._enforce = {key: bool(value[key]) for key in ("fs", "net", "scope", "seccomp")}
        tier: Tier = (
            "full" if fs and seccomp else "landlock" if fs else "seccomp" if seccomp else "none"
        )
        notes = [*self._server.ready.get("notes", []), value["notes"]]
        missing = [key for key in ("fs", "seccomp") if not value[key]]
        reason: str | None = None
        if tier != "full":
            detail = "; ".join(dict.fromkeys(n for n in notes if n)) or "no reason reported"
            reason = f"not enforced: {', '.join(missing)} ({detail})"
        abi = int(value["landlock_abi"])
        return ProbeReport(tier, abi, fs, value["net"], value["scope"], seccomp, reason)

    def _call_locked(self, request: CallRequest, timeout_s: float, best_effort: bool) -> CallResult:
        try:
            server = self._ensure_server()
        except ConfinementUnavailable as exc:
            return CallResult("crash", None, f"sandbox unavailable: {exc}", None, None, "")
        try:
            scratch = self._take_scratch()
        except OSError as exc:
            return CallResult("crash", None, f"no scratch directory: {exc}", None, None, "")
        deadline = time.monotonic() + timeout_s
        seccomp = self._enforce["seccomp"]
        try:
            outcome = self._run(server, request, timeout_s, scratch, best_effort)
        finally:
            removal = self._remove_scratch(scratch, max(deadline, time.monotonic() + MIN_CLEANUP_S))
        if outcome.server_died:
            server.stop()
            self._server_dead = "the fork server died during a call"
            # Restart now; if that fails too, the next call retries and reports it.
            with contextlib.suppress(ConfinementUnavailable):
                self._ensure_server()
        result = classify(request.family, outcome, timeout_s, seccomp=seccomp)
        return _with_scratch_verdict(result, removal)

    def _remove_scratch(self, scratch: Path, deadline: float) -> TreeRemoval:
        """Remove a call's scratch within its budget and deadline; the rest goes to a thread."""
        removal = remove_tree(scratch, max_entries=MAX_SCRATCH_ENTRIES, deadline=deadline)
        if not removal.done and removal.error is None:
            self._cleaners = [c for c in self._cleaners if c.is_alive()]
            cleaner = threading.Thread(
                target=lambda: self._note_failure("scratch", remove_tree(scratch)),
                name="agent-runner-scratch-cleanup",
                daemon=True,
            )
            try:
                cleaner.start()
            except RuntimeError as exc:  # no thread to spare: close() removes the root
                removal.error = f"scratch cleanup could not continue: {exc}"
            else:
                self._cleaners.append(cleaner)
        return removal

    def _note_failure(self, what: str, removal: TreeRemoval) -> None:
        if removal.error is not None:
            self.cleanup_notes.append(f"{what} not removed: {removal.error}")

    def _run(
        self,
        server: ForkServer,
        request: CallRequest,
        timeout_s: float,
        scratch: Path,
        best_effort: bool,
    ) -> Outcome:
        payload = wire.encode_request(
            request.family, request.entry, request.hook, request.view, request.sources
        )
        call_id = next(self._ids)
        message = {
            "op": "spawn",
            "id": call_id,
            "scratch": str(scratch),
            "read_roots": [str(Path(p).resolve()) for p in request.read_roots],
            **self._enforce,
            "best_effort": best_effort,
            "timeout_s": timeout_s,
        }
        return server.run_call(message, payload, timeout_s, meanwhile=self._prepare_spare)

    def _ensure_server(self) -> ForkServer:
        """The live fork server, restarted (with an event) if it died since the last call."""
        if self._server is None:
            raise RuntimeError("Sandbox.start() has not been called")
        if self._server_dead is None and not self._server.alive():
            self._server.stop()
            self._server_dead = (
                f"the fork server exited with status {self._server.process.returncode}"
            )
        if self._server_dead is not None:
            self._restarts += 1
            self._emit(
                "sandbox_server_restarted", reason=self._server_dead, restarts=self._restarts
            )
            self._server = ForkServer(self._mode, self._base_roots())
            self._server_dead = None
        return self._server

    def _base_roots(self) -> list[str]:
        """Read-only roots every child gets besides the interpreter and the stdlib."""
        import agent_runner  # noqa: PLC0415

        roots = [str(Path(agent_runner.__file__).resolve().parent)]
        # Public time zone data, so datetime and zoneinfo work as they do outside.
        roots += [path for path in TIMEZONE_DATA if os.path.exists(path)]
        return roots

    def _make_scratch_root(self) -> Path:
        if self._given_scratch_root is not None:
            root = self._given_scratch_root
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(tempfile.mkdtemp(prefix="agent-runner-sandbox-"))
        # Traversable, not listable: the unprivileged child reaches only its own directory.
        root.chmod(0o711)
        return root

    def _make_scratch(self) -> Path:
        assert self._scratch_root is not None
        path = Path(tempfile.mkdtemp(prefix="call-", dir=self._scratch_root))
        if os.geteuid() == 0:
            os.chown(path, NOBODY, NOBODY)
        return path

    def _prepare_spare(self) -> None:
        if self._spare is None:
            # A failure here is the next call's to report, when it makes its own.
            with contextlib.suppress(OSError):
                self._spare = self._make_scratch()

    def _take_scratch(self) -> Path:
        """This call's scratch: the spare if it is still as it was made, else a new one."""
        spare, self._spare = self._spare, None
        if spare is None:
            return self._make_scratch()
        if _unchanged_and_empty(spare):
            return spare
        self._note_failure("spare scratch", remove_tree(spare))
        return self._make_scratch()


def _unchanged_and_empty(scratch: Path) -> bool:
    """Whether `scratch` is still the empty directory `_make_scratch` made (never a link)."""
    owner = NOBODY if os.geteuid() == 0 else os.geteuid()
    try:
        fd = os.open(scratch, _DIR_FLAGS)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o7777 != 0o700 or info.st_uid != owner:
            return False
        with os.scandir(fd) as entries:
            return next(entries, None) is None
    finally:
        os.close(fd)


@dataclass
class TreeRemoval:
    """How removing a directory tree went."""

    entries: int = 0
    bytes: int = 0
    done: bool = False
    out_of_time: bool = False
    error: str | None = None


def _with_scratch_verdict(result: CallResult, removal: TreeRemoval) -> CallResult:
    """The call's result, failed when its scratch was over budget or not removed in time."""
    notes = []
    if removal.entries > MAX_SCRATCH_ENTRIES or removal.bytes > MAX_SCRATCH_BYTES:
        notes.append(
            f"left more than its scratch budget ({removal.entries} entries, "
            f"{removal.bytes} bytes; limits {MAX_SCRATCH_ENTRIES} entries, "
            f"{MAX_SCRATCH_BYTES} bytes)"
        )
    elif removal.out_of_time:
        notes.append(
            f"left more in its scratch than could be removed before its deadline "
            f"({removal.entries} entries removed)"
        )
    if removal.error is not None:
        notes.append(f"scratch not removed: {removal.error}")
    if not notes:
        return result
    detail = "; ".join([result.detail, *notes] if result.detail else notes)
    if result.status == "ok":
        return replace(result, status="crash", value=None, detail=detail)
    return replace(result, detail=detail)


def remove_tree(
    path: Path, max_entries: int | None = None, deadline: float | None = None
) -> TreeRemoval:
    """Delete `path` and all beneath it, without recursion and without following symlinks.

    Holds two descriptors at most whatever the depth. A directory its owner made unreadable
    or unwritable (`mkdir(d, 0o300)`) is given its owner's rights back first: the files are
    ours. Stops once more than `max_entries` entries are gone or at `deadline` (monotonic
    clock), with `done` False. Never raises: a failure is `error`.
    """
    removal = TreeRemoval()
    try:
        _remove_tree(str(path), removal, _Budget(max_entries, deadline))
    except Exception as exc:  # whatever a child left behind, cleanup never raises into a call
        removal.error = f"{type(exc).__name__}: {exc}"
    return removal


@dataclass(frozen=True)
class _Budget:
    max_entries: int | None
    deadline: float | None

    def spent(self, removal: TreeRemoval) -> bool:
        if self.max_entries is not None and removal.entries > self.max_entries:
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            removal.out_of_time = True
            return True
        return False


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    """Open a directory to list and empty it, restoring its owner's rwx first if they lack it."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        handle = os.open(name, _DIR_PATH_FLAGS, dir_fd=dir_fd)
        try:
            # An O_PATH descriptor cannot fchmod; its /proc link names exactly that inode.
            os.chmod(f"/proc/self/fd/{handle}", 0o700)
        finally:
            os.close(handle)
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    mode = os.fstat(fd).st_mode
    if mode & 0o700 != 0o700:
        os.fchmod(fd, (mode & 0o7777) | 0o700)
    return fd


def _remove_tree(path: str, removal: TreeRemoval, budget: _Budget) -> None:
    try:
        fd = _open_dir(path)
    except FileNotFoundError:
        removal.done = True
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        os.unlink(path)  # a symlink or file where the tree was: remove the link, never its target
        removal.done = True
        return
    # For each directory on the way down: its name, its parent's identity, its parent's to-do.
    above: list[tuple[str, tuple[int, int], list[str]]] = []
    try:
        here = _identity(fd)
        pending = _unlink_files(fd, removal, budget)
        while True:
            if budget.spent(removal):
                return  # over budget or out of time: the caller decides who removes the rest
            if pending:
                name = pending.pop()
                child = _open_dir(name, fd)
                above.append((name, here, pending))
                os.close(fd)
                fd = child
                here = _identity(fd)
                pending = _unlink_files(fd, removal, budget)
                continue
            if not above:
                break
            name, parent, pending = above.pop()
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = up
            here = _identity(fd)
            # ".." follows a rename: a tree moved elsewhere under us must not be emptied there.
            if here != parent:
                raise OSError(f"{path}: a directory moved during removal")
            os.rmdir(name, dir_fd=fd)
            removal.entries += 1
    finally:
        os.close(fd)
    os.rmdir(path)
    removal.done = True


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _unlink_files(fd: int, removal: TreeRemoval, budget: _Budget) -> list[str]:
    """Unlink the non-directories in `fd` (within the budget); return the subdirectories' names."""
    directories = []
    with os.scandir(fd) as entries:
        for entry in entries:
            if budget.spent(removal):
                break
            if entry.is_dir(follow_symlinks=False):
                directories.append(entry.name)
                continue
            removal.bytes += entry.stat(follow_symlinks=False).st_blocks * 512
            os.unlink(entry.name, dir_fd=fd)
            removal.entries += 1
    return directories
