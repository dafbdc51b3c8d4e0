"""One Sandbox under test, in either of the two ways a supervisor runs: as root, or as a user.

`InProcess` is a Sandbox in the test process (root on this host and in CI). `AsUser` runs a
whole Sandbox in a driver process that dropped to an unused uid before importing anything
of the sandbox (`tests.unprivileged`), the `systemctl --user` case, and forwards each call
over a pipe. Both have the same surface, so one test body runs the real attack in both modes.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import stat
import sys
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any, Literal

from agent_runner.errors import ConfinementUnavailable
from agent_runner.plugins.parent.sandbox import CallRequest, CallResult, ProbeReport, Sandbox
from tests import unprivileged
from tests.fakes import RecordedEvents

Mode = Literal["root", "unprivileged"]
MODES: tuple[Mode, ...] = ("root", "unprivileged")
NOBODY = 65534


class InProcess:
    """A Sandbox run by the test process itself."""

    mode: Mode = "root"

    def __init__(
        self, sandbox_mode: str, hook_timeout_s: float = 5.0, scratch_root: Path | None = None
    ) -> None:
        self._events = RecordedEvents()
        self.sandbox = Sandbox(
            sandbox_mode,  # type: ignore[arg-type]
            emit=self._events,
            hook_timeout_s=hook_timeout_s,
            scratch_root=scratch_root,
        )

    def start(self) -> ProbeReport:
        return self.sandbox.start()

    def call(self, request: CallRequest, timeout_s: float | None = None) -> CallResult:
        return self.sandbox.call(request, timeout_s)

    def self_test(self) -> dict[str, bool]:
        return self.sandbox.self_test()

    def close(self) -> None:
        self.sandbox.close()

    def events(self) -> RecordedEvents:
        return RecordedEvents(list(self._events.events))

    def kill_server(self) -> None:
        server = self.sandbox._server
        assert server is not None
        server.process.kill()
        server.process.wait()

    def child_can_read(self, path: str) -> bool:
        """Whether ordinary permissions alone let plugin code read `path`."""
        if os.geteuid() != 0:
            return os.access(path, os.R_OK)
        # As root the child is nobody, in no group of any file here: only "other" bits count.
        target = Path(path)
        traversable = all(p.stat().st_mode & stat.S_IXOTH for p in target.parents)
        return traversable and bool(target.stat().st_mode & stat.S_IROTH)

    def facts(self) -> dict[str, Any]:
        """The sandbox's internals a test inspects: scratch root, server pid and roots, uids."""
        server = self.sandbox._server
        root = self.sandbox._scratch_root
        spare = self.sandbox._spare
        return {
            "report": None if self.sandbox.report is None else self.sandbox.report.to_dict(),
            "scratch_root": None if root is None else str(root),
            "spare_scratch": None if spare is None else str(spare),
            "server_pid": None if server is None else server.process.pid,
            "read_roots": None if server is None else server.ready["read_roots"],
            "cleanup_notes": list(self.sandbox.cleanup_notes),
            "supervisor_uid": os.geteuid(),
            "child_uid": NOBODY if os.geteuid() == 0 else os.geteuid(),
        }

    @property
    def report(self) -> ProbeReport | None:
        return self.sandbox.report

    @property
    def scratch_root(self) -> Path | None:
        root = self.facts()["scratch_root"]
        return None if root is None else Path(root)

    def left_in_scratch_root(self) -> list[Path]:
        """What the scratch root holds besides the next call's scratch (made empty, and so)."""
        root, spare = self.scratch_root, self.facts()["spare_scratch"]
        assert root is not None
        if spare is not None:
            assert not any(Path(spare).iterdir()), "the spare scratch is not empty"
        return sorted(path for path in root.iterdir() if str(path) != spare)

    @property
    def server_pid(self) -> int:
        return int(self.facts()["server_pid"])

    @property
    def read_roots(self) -> list[str]:
        return list(self.facts()["read_roots"])

    @property
    def cleanup_notes(self) -> list[str]:
        return list(self.facts()["cleanup_notes"])

    @property
    def supervisor_uid(self) -> int:
        return int(self.facts()["supervisor_uid"])

    @property
    def child_uid(self) -> int:
        """The uid plugin code runs as: nobody under a root supervisor, else the supervisor's."""
        return int(self.facts()["child_uid"])


class AsUser(InProcess):
    """A Sandbox run by a driver process that is an unused non-root uid from the start."""

    mode: Mode = "unprivileged"

    def __init__(
        self, sandbox_mode: str, hook_timeout_s: float = 5.0, *, user_namespaces: bool = True
    ) -> None:
        # user_namespaces=False: the host refuses them (unshare fails with EPERM, as under a
        # sysctl or an LSM that forbids them), by a seccomp filter on the driver itself.
        args = (sandbox_mode, str(hook_timeout_s), "userns" if user_namespaces else "no-userns")
        self._process = unprivileged.popen("tests.security.harness", *args)

    def _ask(self, op: str, **args: Any) -> Any:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the unprivileged driver died (status {self._process.wait()})")
        answer = json.loads(line)
        if "unavailable" in answer:
            raise ConfinementUnavailable(answer["unavailable"])
        return answer["value"]

    def start(self) -> ProbeReport:
        return ProbeReport(**self._ask("start"))

    def call(self, request: CallRequest, timeout_s: float | None = None) -> CallResult:
        return CallResult(**self._ask("call", request=_encode(request), timeout_s=timeout_s))

    def self_test(self) -> dict[str, bool]:
        return dict(self._ask("self_test"))

    def close(self) -> None:
        if self._process.poll() is None:
            self._ask("close")
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()
        self._process.wait(timeout=30)

    def events(self) -> RecordedEvents:
        return RecordedEvents(self._ask("events"))

    def kill_server(self) -> None:
        self._ask("kill_server")

    def child_can_read(self, path: str) -> bool:
        return bool(self._ask("readable", path=path))

    def facts(self) -> dict[str, Any]:
        return dict(self._ask("facts"))

    @property
    def report(self) -> ProbeReport | None:
        report = self.facts()["report"]
        return None if report is None else ProbeReport(**report)


def create(mode: Mode, sandbox_mode: str, hook_timeout_s: float = 5.0) -> InProcess:
    """A harness of `mode`, not started yet."""
    if mode == "root":
        return InProcess(sandbox_mode, hook_timeout_s)
    return AsUser(sandbox_mode, hook_timeout_s)


def _encode(request: CallRequest) -> dict[str, Any]:
    return {
        "family": request.family,
        "sources": {k: base64.b64encode(v).decode() for k, v in request.sources.items()},
        "entry": request.entry,
        "hook": request.hook,
        "view": dict(request.view),
        "read_roots": [str(p) for p in request.read_roots],
    }


def _decode(data: dict[str, Any]) -> CallRequest:
    return CallRequest(
        data["family"],
        {k: base64.b64decode(v) for k, v in data["sources"].items()},
        data["entry"],
        data["hook"],
        data["view"],
        tuple(Path(p) for p in data["read_roots"]),
    )


def _serve(harness: InProcess, requests: IO[bytes], answers: IO[bytes]) -> None:
    """The driver's loop: one JSON request per line in, one JSON answer per line out."""
    for line in requests:
        message = json.loads(line)
        op = message["op"]
        try:
            if op == "start":
                value: Any = harness.start().to_dict()
            elif op == "call":
                result = harness.call(_decode(message["request"]), message["timeout_s"])
                value = asdict(result)
            elif op == "self_test":
                value = harness.self_test()
            elif op == "events":
                value = harness.events().events
            elif op == "kill_server":
                harness.kill_server()
                value = None
            elif op == "readable":
                value = harness.child_can_read(message["path"])
            elif op == "facts":
                value = harness.facts()
            elif op == "close":
                harness.close()
                value = None
            else:
                raise ValueError(f"unknown op {op!r}")
            answer: dict[str, Any] = {"value": value}
        except ConfinementUnavailable as exc:
            answer = {"unavailable": str(exc)}
        answers.write(json.dumps(answer).encode() + b"\n")
        answers.flush()


def _refuse_user_namespaces() -> None:
    import pyseccomp as sc

    refusal = sc.SyscallFilter(sc.ALLOW)
    refusal.add_rule(sc.ERRNO(errno.EPERM), "unshare")
    refusal.load()


if __name__ == "__main__":
    if os.geteuid() == 0:
        raise SystemExit("the unprivileged driver must not run as root")
    sandbox_mode, timeout, namespaces = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    if namespaces == "no-userns":
        _refuse_user_namespaces()
    _serve(InProcess(sandbox_mode, timeout), sys.stdin.buffer, sys.stdout.buffer)
