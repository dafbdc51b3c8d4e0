"""Parent side of the fork-server protocol: start the server, and drive one call's pipes.

Every call ends inside one deadline: past it, or past the result cap, the child's group is
killed through the server, and a server that cannot confirm the kill is treated as dead.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent_runner.errors import ConfinementUnavailable
from agent_runner.plugins import childenv, wire

Mode = Literal["require", "prefer", "off"]
READY_TIMEOUT_S = 15.0
KILL_WAIT_S = 3.0
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
from agent_runner.plugins.child import forkserver
forkserver.main(sys.argv[1])
"""


@dataclass
class Outcome:
    """What the parent observed of one child, before classification."""

    result: bytes = b""
    stderr: bytes = b""
    wait_status: int | None = None
    timed_out: bool = False
    oversized: bool = False
    server_died: bool = False


class ForkServer:
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
        env = childenv.allowed_environment(os.environ)
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

    def run_call(
        self,
        message: Mapping[str, Any],
        payload: bytes,
        timeout_s: float,
        meanwhile: Callable[[], None] = lambda: None,
    ) -> Outcome:
        """Spawn a child for `message`; feed it `payload`; drain it to its end or the deadline.

        `meanwhile` runs once the server has the call, while the child starts.
        """
        req_r, req_w = os.pipe2(os.O_CLOEXEC)
        res_r, res_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        exchange = _Exchange(self, int(message["id"]), payload, (req_w, res_r, err_r))
        # Into the pipe before the server hears of the call (as much as the pipe holds): waking
        # the server often preempts this process, and the child must not wait for it then.
        exchange.feed()
        deadline = time.monotonic() + timeout_s
        sent = self.send(message, (req_r, res_w, err_w))
        for fd in (req_r, res_w, err_w):
            os.close(fd)
        if not sent:
            exchange.close()
            return Outcome(server_died=True)
        meanwhile()
        return exchange.run(deadline)

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


class _Exchange:
    """One call's I/O: feed the request, drain result and stderr, follow the server's reports."""

    def __init__(
        self, server: ForkServer, call_id: int, payload: bytes, fds: tuple[int, int, int]
    ) -> None:
        req_w, res_r, err_r = fds
        self._server = server
        self._call_id = call_id
        self._payload = memoryview(payload)
        self._req_w, self._res_r, self._err_r = req_w, res_r, err_r
        self._outcome = Outcome()
        self._result = bytearray()
        self._stderr = bytearray()
        self._open = {res_r, err_r}

    def close(self) -> None:
        """Close every descriptor this exchange still holds."""
        for fd in (self._req_w, self._res_r, self._err_r):
            _close_quietly(fd)
        self._req_w = self._res_r = self._err_r = -1

    def feed(self) -> None:
        """Write what the request pipe takes now; close it once the whole request is in."""
        os.set_blocking(self._req_w, False)
        while self._write_request():
            pass
        if not self._payload:
            self._end_request()

    def run(self, deadline: float) -> Outcome:
        """Drive the exchange to the child's end or the deadline (monotonic clock)."""
        try:
            return self._run(deadline)
        finally:
            self.close()

    def _run(self, deadline: float) -> Outcome:
        with selectors.DefaultSelector() as selector:
            for fd in (self._res_r, self._err_r):
                os.set_blocking(fd, False)
            if self._req_w >= 0:
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
            self._write_request()
            if not self._payload:
                selector.unregister(fd)
                self._end_request()
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

    def _write_request(self) -> bool:
        """One write of what is left of the request; False once the pipe is full or all is in."""
        try:
            written = os.write(self._req_w, self._payload[:65536])
        except BlockingIOError:
            return False
        except OSError:
            written = len(self._payload)  # the child closed its input; it has what it read
        self._payload = self._payload[written:]
        return bool(self._payload)

    def _end_request(self) -> None:
        # Closing our end is the child's end-of-request.
        _close_quietly(self._req_w)
        self._req_w = -1

    def _take_message(self, message: dict[str, Any] | None) -> None:
        if self._server.gone:
            self._outcome.server_died = True
        elif message is None or message.get("id") != self._call_id:
            return
        elif message.get("event") == "exited":
            self._outcome.wait_status = int(message["status"])

    def _kill_and_wait(self) -> None:
        """Kill the child's whole group through the server and wait for its wait status."""
        deadline = time.monotonic() + KILL_WAIT_S
        # The server handles messages in order: the child this names exists by then.
        self._server.send({"op": "kill", "id": self._call_id})
        while self._outcome.wait_status is None and not self._outcome.server_died:
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
