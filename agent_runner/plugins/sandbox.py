"""Parent side of the trampoline: the fork server's lifecycle, per-call deadlines, capped reads.

Nothing a child does can raise out of `Sandbox.call`: every outcome becomes a `CallResult`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from agent_runner.errors import ConfinementUnavailable
from agent_runner.plugins import wire

Mode = Literal["require", "prefer", "off"]
Tier = Literal["full", "landlock", "seccomp", "none"]
Status = Literal["ok", "raised", "invalid_result", "timeout", "crash", "sandbox_kill", "oom"]
NOBODY = 65534
READY_TIMEOUT_S = 15.0
KILL_WAIT_S = 3.0
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
ENV_ALLOWED = ("PATH", "LANG", "TZ")
TIMEZONE_DATA = ("/usr/share/zoneinfo", "/etc/localtime")
_BOOT = """\
import importlib.util, json, sys
_cfg = json.loads(sys.argv[1])
class _Located:
    @staticmethod
    def find_spec(name, path=None, target=None):
        where = _cfg["locations"].get(name)
        if where is None:
            return None
        return importlib.util.spec_from_file_location(
            name, where[0], submodule_search_locations=where[1])
sys.meta_path.insert(0, _Located)
from agent_runner.plugins import forkserver
forkserver.main(sys.argv[1])
"""


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


@dataclass
class _Outcome:
    """What the parent observed of one child, before classification."""

    result: bytes = b""
    stderr: bytes = b""
    wait_status: int | None = None
    timed_out: bool = False
    oversized: bool = False
    server_died: bool = False


def classify(  # noqa: PLR0911, PLR0912 - one branch per distinguishable end of a call
    family: str, outcome: _Outcome, timeout_s: float
) -> CallResult:
    """Turn what was observed of a child into a CallResult (pure)."""
    tail = outcome.stderr[-wire.MAX_STDERR_BYTES :].decode("utf-8", "replace")
    out_of_memory = "MemoryError" in tail or "Cannot allocate memory" in tail

    def failed(status: Status, detail: str, sig: str | None = None) -> CallResult:
        return CallResult(status, None, detail, sig, None, tail)

    if outcome.timed_out:
        return failed("timeout", f"no result within {timeout_s:g} s")
    if outcome.server_died:
        return failed("crash", "the sandbox fork server died during the call")
    if outcome.oversized:
        return failed("invalid_result", f"result larger than {wire.MAX_RESULT_BYTES} bytes")
    status = outcome.wait_status if outcome.wait_status is not None else 0
    if os.WIFSIGNALED(status):
        name = _signal_name(os.WTERMSIG(status))
        if name == "SIGSYS":
            return failed("sandbox_kill", "killed by the seccomp filter", name)
        if name == "SIGXCPU":
            return failed("timeout", "CPU time limit reached", name)
        if out_of_memory:
            return failed("oom", f"killed by {name} after running out of memory", name)
        return failed("crash", f"killed by {name}", name)
    code = os.WEXITSTATUS(status)
    if not outcome.result:
        if out_of_memory:
            return failed("oom", "ran out of memory before writing a result")
        return failed("crash", f"exited with status {code} without a result")
    try:
        kind, value, detail = wire.parse_envelope(family, outcome.result)
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


class _ForkServer:
    """The running fork server process and its control socket."""

    def __init__(self, mode: Mode, read_roots: list[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {
            "parent_pid": os.getpid(),
            "control_fd": theirs.fileno(),
            "mode": mode,
            "read_roots": read_roots,
            "locations": _module_locations(mode),
        }
        env = {k: v for k, v in os.environ.items() if k in ENV_ALLOWED or k.startswith("LC_")}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", "-c", _BOOT, json.dumps(config)],
                env=env,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self.sock = ours
        self.gone = False
        ready = self.receive(READY_TIMEOUT_S)
        if ready is None or ready.get("event") != "ready":
            self.stop()
            raise ConfinementUnavailable("the sandbox fork server did not start")
        self.ready = ready

    def send(self, message: Mapping[str, Any], fds: tuple[int, ...] = ()) -> bool:
        """Send one message; False when the server is gone."""
        try:
            socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))
        except OSError:
            self.gone = True
            return False
        return True

    def receive(self, timeout_s: float) -> dict[str, Any] | None:
        """The next message, or None after timeout_s of silence or when the server is gone."""
        self.sock.settimeout(max(timeout_s, 0.0))
        try:
            data = self.sock.recv(wire.MAX_RESULT_BYTES)
        except (TimeoutError, BlockingIOError):
            return None
        except OSError:
            data = b""
        finally:
            self.sock.setblocking(False)
        if not data:
            self.gone = True
            return None
        message: dict[str, Any] = json.loads(data)
        return message

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def stop(self) -> None:
        """Close the control socket and make sure the process is gone."""
        self.sock.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _module_locations(mode: Mode) -> dict[str, tuple[str, list[str] | None]]:
    """Where the isolated server finds agent-runner and the confinement bindings (no site)."""
    import agent_runner  # noqa: PLC0415

    locations: dict[str, tuple[str, list[str] | None]] = {}
    package = Path(agent_runner.__file__).parent
    locations["agent_runner"] = (str(package / "__init__.py"), [str(package)])
    if mode == "off":
        return locations
    import importlib.util  # noqa: PLC0415

    for name in ("py_landlock", "pyseccomp"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            locations[name] = (
                spec.origin,
                spec.submodule_search_locations
                and [str(p) for p in spec.submodule_search_locations],
            )
    return locations


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
        self._server: _ForkServer | None = None
        self._enforce = {"fs": False, "net": False, "scope": False, "seccomp": False}
        self._lock = threading.Lock()
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
        self._server = _ForkServer(self._mode, self._base_roots())
        self.report = self._probe()
        if self._mode == "off" or self.report.tier == "full":
            return self.report
        self._emit(
            "plugin_sandbox_degraded",
            requested=self._mode,
            achieved_tier=self.report.tier,
            reason=self.report.unconfined_reason,
        )
        if self._mode == "require":
            self.close()
            raise ConfinementUnavailable(
                f'sandbox = "require" but this host only achieves tier {self.report.tier!r}: '
                f"{self.report.unconfined_reason}"
            )
        return self.report

    def call(self, request: CallRequest, timeout_s: float | None = None) -> CallResult:
        """Run one call in a fresh confined child; never raises for what the child does."""
        timeout = self._timeout_s if timeout_s is None else timeout_s
        with self._lock:
            return self._call_locked(request, timeout, best_effort=False)

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
        shutil.rmtree(outside, ignore_errors=True)
        return report

    def close(self) -> None:
        """Stop the fork server and remove scratch space."""
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None
            if self._scratch_root is not None and self._given_scratch_root is None:
                shutil.rmtree(self._scratch_root, ignore_errors=True)
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
        scratch = self._make_scratch()
        try:
            outcome = self._run(server, request, timeout_s, scratch, best_effort)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if outcome.server_died:
            server.stop()
            self._server_dead = "the fork server died during a call"
            # Restart now; if that fails too, the next call retries and reports it.
            with contextlib.suppress(ConfinementUnavailable):
                self._ensure_server()
        return classify(request.family, outcome, timeout_s)

    def _run(
        self,
        server: _ForkServer,
        request: CallRequest,
        timeout_s: float,
        scratch: Path,
        best_effort: bool,
    ) -> _Outcome:
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
        req_r, req_w = os.pipe2(os.O_CLOEXEC)
        res_r, res_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        sent = server.send(message, (req_r, res_w, err_w))
        for fd in (req_r, res_w, err_w):
            os.close(fd)
        exchange = _Exchange(server, call_id, payload, (req_w, res_r, err_r))
        if not sent:
            exchange.close()
            return _Outcome(server_died=True)
        return exchange.run(timeout_s)

    def _ensure_server(self) -> _ForkServer:
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
            self._server = _ForkServer(self._mode, self._base_roots())
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


class _Exchange:
    """One call's I/O: feed the request, drain result and stderr, follow the server's reports."""

    def __init__(
        self, server: _ForkServer, call_id: int, payload: bytes, fds: tuple[int, int, int]
    ) -> None:
        req_w, res_r, err_r = fds
        self._server = server
        self._call_id = call_id
        self._payload = memoryview(payload)
        self._req_w, self._res_r, self._err_r = req_w, res_r, err_r
        self._outcome = _Outcome()
        self._result = bytearray()
        self._stderr = bytearray()
        self._open = {res_r, err_r}
        self._pid: int | None = None

    def close(self) -> None:
        """Close every descriptor this exchange still holds."""
        for fd in (self._req_w, self._res_r, self._err_r):
            _close_quietly(fd)
        self._req_w = self._res_r = self._err_r = -1

    def run(self, timeout_s: float) -> _Outcome:
        """Drive the exchange to the child's end or the deadline."""
        try:
            return self._run(timeout_s)
        finally:
            self.close()

    def _run(self, timeout_s: float) -> _Outcome:
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            for fd in (self._req_w, self._res_r, self._err_r):
                os.set_blocking(fd, False)
            selector.register(self._req_w, selectors.EVENT_WRITE)
            selector.register(self._res_r, selectors.EVENT_READ)
            selector.register(self._err_r, selectors.EVENT_READ)
            selector.register(self._server.sock, selectors.EVENT_READ)
            while not self._done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._outcome.timed_out = True
                    break
                for key, _ in selector.select(remaining):
                    self._handle(selector, key.fd)
                if self._outcome.server_died:
                    return self._outcome
                if self._outcome.oversized:
                    break
        if self._outcome.wait_status is None:
            self._kill_and_wait()
        self._outcome.result = bytes(self._result)
        self._outcome.stderr = bytes(self._stderr)
        return self._outcome

    def _done(self) -> bool:
        return not self._open and self._outcome.wait_status is not None

    def _handle(self, selector: selectors.BaseSelector, fd: int) -> None:
        if fd == self._req_w:
            try:
                written = os.write(fd, self._payload[:65536])
            except BlockingIOError:
                return
            except OSError:
                written = len(self._payload)  # the child closed its input; it has what it read
            self._payload = self._payload[written:]
            if not self._payload:
                # Closing our end is the child's end-of-request.
                selector.unregister(fd)
                _close_quietly(fd)
                self._req_w = -1
        elif fd in (self._res_r, self._err_r):
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                selector.unregister(fd)
                self._open.discard(fd)
            elif fd == self._res_r:
                self._result += chunk
                self._outcome.oversized = len(self._result) > wire.MAX_RESULT_BYTES
            else:
                self._stderr += chunk
                del self._stderr[: -wire.MAX_STDERR_BYTES]
        else:
            self._take_message(self._server.receive(0))

    def _take_message(self, message: dict[str, Any] | None) -> None:
        if self._server.gone:
            self._outcome.server_died = True
        elif message is None or message.get("id") != self._call_id:
            return
        elif message.get("event") == "spawned":
            self._pid = int(message["pid"])
        elif message.get("event") == "exited":
            self._outcome.wait_status = int(message["status"])

    def _kill_and_wait(self) -> None:
        """Kill the child's whole group through the server and wait for its wait status."""
        deadline = time.monotonic() + KILL_WAIT_S
        killed = False
        while self._outcome.wait_status is None and not self._outcome.server_died:
            if self._pid is not None and not killed:
                killed = self._server.send({"op": "kill", "pid": self._pid})
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                # A server that cannot report within seconds is wedged: treat it as dead.
                self._server.process.kill()
                self._outcome.server_died = True
                return
            self._take_message(self._server.receive(remaining))


def _close_quietly(fd: int) -> None:
    if fd < 0:
        return
    try:
        os.close(fd)
    except OSError:
        return
