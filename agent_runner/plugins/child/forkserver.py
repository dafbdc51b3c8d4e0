"""The fork server: an isolated, pre-initialised process that forks one confined child per call.

Started by `forkclient.ForkServer` with `python -I -S -B`, a scrubbed environment and cwd "/"; it
holds no secrets and never imports plugin code. Protocol: JSON datagrams on a SEQPACKET socket.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import sysconfig
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from agent_runner.plugins import childenv
from agent_runner.plugins.child import confine, syscalls

PR_SET_CHILD_SUBREAPER = 36
HIGH_FD = 100
SWEEP_S = 2.0
MAX_MESSAGE_BYTES = 1 << 16
# Modules a typical hook needs: the child cannot open the stdlib by path once it runs as nobody.
PRELOADED = (
    "base64",
    "bisect",
    "calendar",
    "collections",
    "collections.abc",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "fnmatch",
    "functools",
    "heapq",
    "itertools",
    "json",
    "math",
    "operator",
    "pathlib",
    "random",
    "re",
    "shlex",
    "statistics",
    "string",
    "textwrap",
    "time",
    "types",
    "typing",
    "uuid",
    "zoneinfo",
)

PRELOADED_CODECS = ("ascii", "idna", "latin-1", "utf-8", "utf-16", "utf-32")
# Where installed distributions live; some layouts put them inside the stdlib directory.
SHARED_PACKAGE_DIRS = ("site-packages", "dist-packages")
BINDINGS = ("py_landlock", "pyseccomp")


def main(config_json: str) -> None:
    """Run the server until the control socket closes."""
    config = json.loads(config_json)
    confine.set_parent_death_signal(int(config["parent_pid"]))
    confine._prctl(PR_SET_CHILD_SUBREAPER, 1)
    # A call child's exit must be reaped by us, explicitly, after its group is killed.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # Every child inherits this environment: reduced to the allow-list here, once.
    kept = childenv.allowed_environment(os.environ)
    os.environ.clear()
    os.environ.update(kept)
    prebuilt = prepare(config)
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            prebuilt.notes.append(f"preload {name}: {exc}")
    for codec in PRELOADED_CODECS:
        codecs.lookup(codec)
    # Every child starts with an empty importer cache: emptied here once, not freed in each.
    sys.path_importer_cache.clear()
    # Children then never write to the pages these objects live on when they collect garbage.
    gc.collect()
    gc.freeze()
    control = socket.socket(fileno=int(config["control_fd"]))
    ready = {
        "event": "ready",
        "landlock_abi": prebuilt.landlock_abi,
        "seccomp": bool(prebuilt.seccomp_bpf),
        "notes": prebuilt.notes,
        "read_roots": prebuilt.read_roots,
    }
    control.send(json.dumps(ready).encode())
    Server(control, prebuilt).serve()


def prepare(config: dict[str, Any]) -> confine.Prebuilt:
    """Do once what every child would otherwise repeat: ABI query, root descriptors, BPF."""
    prebuilt = confine.Prebuilt(
        is_root=os.geteuid() == 0,
        server_pid=os.getpid(),
        stdlib_paths=[p for p in sys.path if p],
    )
    if config["mode"] == "off":
        return prebuilt
    bindings = [config["locations"][name] for name in BINDINGS if name in config["locations"]]
    roots = [*config["read_roots"]]
    for origin, search_dirs in bindings:
        roots += search_dirs or [origin]
    _prepare_landlock(prebuilt, roots)
    try:
        prebuilt.seccomp_bpf = export_seccomp_bpf(syscalls.child_policy())
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        # pyseccomp raises RuntimeError, not ImportError, when libseccomp.so.2 is missing.
        prebuilt.notes.append(f"seccomp unavailable: {exc}")
    return prebuilt


def _prepare_landlock(prebuilt: confine.Prebuilt, roots: list[str]) -> None:
    try:
        import py_landlock as ll  # noqa: PLC0415 - located by the parent, imported only here
        from py_landlock import abi as ll_abi  # noqa: PLC0415

        abi = int(ll.get_abi_version())
    except Exception as exc:  # ImportError, or any py-landlock error: this host has no Landlock
        prebuilt.notes.append(f"landlock unavailable: {exc}")
        return
    prebuilt.landlock_abi = abi
    prebuilt.handled_fs = int(ll_abi.get_supported_fs(ll.ABIVersion(abi)))
    prebuilt.handled_net = int(ll_abi.get_supported_net(ll.ABIVersion(abi)))
    prebuilt.scoped = int(ll_abi.get_supported_scope(ll.ABIVersion(abi)))
    stdlib = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
    rules = dict(stdlib_read_rules(stdlib))
    for path in {*roots, os.path.realpath(sys.executable)}:
        rules[path] = os.path.isdir(path)
    for path, is_dir in sorted(rules.items()):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as exc:
            prebuilt.notes.append(f"read-only root {path}: {exc.strerror}")
            continue
        # Out of the way of the 0..4 slots every child rearranges its descriptors into.
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
        os.close(fd)
        prebuilt.base_root_fds.append((high, is_dir))
        prebuilt.read_roots.append(path)


def stdlib_read_rules(directories: list[str]) -> list[tuple[str, bool]]:
    """Every entry of the stdlib directories but the shared package directories: (path, is_dir).

    Directories reached through a symlink are left out; a symlink to a file grants that file only.
    """
    rules: dict[str, bool] = {}
    for directory in directories:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.name in SHARED_PACKAGE_DIRS:
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    rules[entry.path] = True
                elif entry.is_file():
                    rules[entry.path] = False
    return sorted(rules.items())


def export_seccomp_bpf(policy: syscalls.Policy) -> bytes:
    """Compile the policy with libseccomp once; children load the bytes with one prctl."""
    import pyseccomp as sc  # noqa: PLC0415 - runs ldconfig; only the fork server pays for it

    if sc.system_arch() != policy.arch:
        raise ValueError("seccomp policy is written for x86_64 only")
    actions = {"allow": sc.ALLOW, "kill": sc.KILL_PROCESS}
    filt = sc.SyscallFilter(syscalls.action_value(policy.default))
    filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    filt.set_attr(sc.Attr.API_SYSRAWRC, 1)
    for rule in policy.rules:
        if rule.action == policy.default:
            continue  # libseccomp refuses a rule that repeats the default (EACCES)
        action = actions.get(rule.action, syscalls.action_value(rule.action))
        if not rule.when:
            filt.add_rule(action, rule.nr)
        for condition in rule.when:
            checks = [sc.Arg(check.index, sc.EQ, check.value) for check in condition]
            filt.add_rule(action, rule.nr, *checks)
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(write_end, "wb") as sink:
            filt.export_bpf(sink)
        program = os.read(read_end, 1 << 16)
    finally:
        os.close(read_end)
    return syscalls.guard_prefix(policy) + program


@dataclass(frozen=True)
class _Standby:
    """A child forked ahead of the next call, waiting on `sock` for it (still unconfined)."""

    pid: int
    pidfd: int
    sock: socket.socket


class Server:
    """Forks children on request, kills their groups on request, reports their wait status.

    The next call's child is forked ahead, once the previous call is reported, so that a call
    does not wait for a fork: it only hands its descriptors to that standby child, which then
    confines itself exactly as a child forked for the call would.
    """

    def __init__(self, control: socket.socket, prebuilt: confine.Prebuilt) -> None:
        self._control = control
        self._prebuilt = prebuilt
        self._children: dict[int, tuple[int, int]] = {}  # pidfd -> (call id, pid)
        self._selector = selectors.DefaultSelector()
        self._selector.register(control, selectors.EVENT_READ)
        self._ruleset = self._next_ruleset()
        self._standby = self._start_standby()

    def _next_ruleset(self) -> int | None:
        """A Landlock ruleset with the read-only roots, for the next child alone.

        Filled while no call waits on the server (after a child is reported), so neither the
        child nor the parent waits for it; None when the child must build it itself.
        """
        if self._prebuilt.landlock_abi < 1:
            return None
        try:
            fd = confine.new_base_ruleset(self._prebuilt)
        except Exception:  # the child builds it again and reports why it cannot
            return None
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
        os.close(fd)
        return high

    def serve(self) -> None:
        """Loop until the parent closes the control socket; then end the standby child."""
        while True:
            for key, _ in self._selector.select():
                if key.fileobj is self._control:
                    if not self._handle_message():
                        if self._standby is not None:
                            self._discard(self._standby)
                        return
                elif self._standby is not None and key.fd == self._standby.pidfd:
                    # Killed while it waited: the next call forks its own child, and only a
                    # call's end starts another standby (one fork a call, however often).
                    self._discard(self._standby)
                    self._standby = None
                elif key.fd in self._children:
                    self._reap(int(key.fd))

    def _handle_message(self) -> bool:
        try:
            data, fds, _, _ = socket.recv_fds(self._control, MAX_MESSAGE_BYTES, 3)
        except OSError:
            return False
        if not data:
            return False
        message = json.loads(data)
        if message["op"] == "spawn":
            self._spawn(message, fds)
        elif message["op"] == "kill":
            self._kill(int(message["id"]))
        for fd in fds:
            os.close(fd)
        return True

    def _spawn(self, message: dict[str, Any], fds: list[int]) -> None:
        cfg = confine.CallConfig(
            scratch=message["scratch"],
            read_roots=tuple(message["read_roots"]),
            fs=message["fs"],
            net=message["net"],
            scope=message["scope"],
            seccomp=message["seccomp"],
            best_effort=message["best_effort"],
            timeout_s=float(message["timeout_s"]),
        )
        ruleset = self._ruleset if self._ruleset is not None else self._next_ruleset()
        self._ruleset = None
        if ruleset is not None:
            ruleset = self._add_call_rules(ruleset, cfg)
        child = self._hand_to_standby(cfg, fds, ruleset)
        if child is None:
            child = self._fork_for_call(cfg, fds, ruleset)
        pidfd, pid = child
        self._children[pidfd] = (int(message["id"]), pid)
        if ruleset is not None:
            os.close(ruleset)  # the child's alone now: it holds the child's scratch

    def _fork_for_call(
        self, cfg: confine.CallConfig, fds: list[int], ruleset: int | None
    ) -> tuple[int, int]:
        pid = os.fork()
        if pid == 0:
            try:
                confine.detach(self._prebuilt)
                confine.confine_and_run(self._prebuilt, cfg, fds, ruleset)
            except BaseException:  # a child must never return into the server loop
                traceback.print_exc()
            finally:
                os._exit(71)
        pidfd = os.pidfd_open(pid)
        self._selector.register(pidfd, selectors.EVENT_READ)
        return pidfd, pid

    def _start_standby(self) -> _Standby | None:
        """Fork the next call's child now; None (the call forks its own) if that fails."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return None
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            try:
                ours.close()
                self._control.close()  # only the server answers the parent
                confine.detach(self._prebuilt)
                cfg, fds, ruleset = _await_call(theirs)
                confine.confine_and_run(self._prebuilt, cfg, fds, ruleset)
            except BaseException:  # a child must never return into the server loop
                traceback.print_exc()
            finally:
                os._exit(71)
        theirs.close()
        pidfd = os.pidfd_open(pid)
        self._selector.register(pidfd, selectors.EVENT_READ)
        return _Standby(pid, pidfd, ours)

    def _hand_to_standby(
        self, cfg: confine.CallConfig, fds: list[int], ruleset: int | None
    ) -> tuple[int, int] | None:
        """Give the call to the standby child: its (pidfd, pid), or None if there is none."""
        standby, self._standby = self._standby, None
        if standby is None:
            return None
        handed = [*fds, *([] if ruleset is None else [ruleset])]
        try:
            socket.send_fds(standby.sock, [json.dumps(asdict(cfg)).encode()], handed)
        except OSError:  # it died meanwhile: the call forks its own
            self._discard(standby)
            return None
        finally:
            standby.sock.close()
        return standby.pidfd, standby.pid

    def _discard(self, standby: _Standby) -> None:
        standby.sock.close()
        self._selector.unregister(standby.pidfd)
        os.close(standby.pidfd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(standby.pid, signal.SIGKILL)
        os.waitpid(standby.pid, 0)

    def _add_call_rules(self, ruleset: int, cfg: confine.CallConfig) -> int | None:
        """`ruleset` with the call's own rules added; None (closed) for the child to retry.

        A path that cannot be added now fails the same way in the child, which reports it.
        """
        try:
            confine.add_call_rules(self._prebuilt, ruleset, cfg)
        except Exception:  # whatever it is, the child meets it again and reports it
            os.close(ruleset)
            return None
        return ruleset

    def _kill(self, call_id: int) -> None:
        # The child is not reaped until _reap runs, so its pid and group id cannot be reused yet.
        for known_id, pid in self._children.values():
            if known_id == call_id:
                self._kill_group(pid)

    def _reap(self, pidfd: int) -> None:
        call_id, pid = self._children.pop(pidfd)
        self._selector.unregister(pidfd)
        os.close(pidfd)
        # Not reaped yet: the zombie pins the pid and group id while its leftovers are swept.
        self._sweep(pid)
        _, status = os.waitpid(pid, 0)
        self._send({"event": "exited", "id": call_id, "pid": pid, "status": status})
        # While no call waits on the server: the next call's child, then its ruleset.
        if self._standby is None:
            self._standby = self._start_standby()
        if self._ruleset is None:
            self._ruleset = self._next_ruleset()

    def _sweep(self, leader: int) -> None:
        """Kill the call's group and every descendant reparented to us, until none is left."""
        known = {pid for _, pid in self._children.values()} | {leader}
        if self._standby is not None:
            known.add(self._standby.pid)
        deadline = time.monotonic() + SWEEP_S
        while time.monotonic() < deadline:
            self._kill_group(leader)
            strays = [pid for pid in _own_children() if pid not in known]
            if not strays:
                return
            for pid in strays:
                with contextlib.suppress(ProcessLookupError, ChildProcessError):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, os.WNOHANG)
            time.sleep(0.01)

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._control.send(json.dumps(message).encode())
        except OSError:
            os._exit(0)  # the parent is gone; our children die with us (PDEATHSIG)

    @staticmethod
    def _kill_group(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _await_call(sock: socket.socket) -> tuple[confine.CallConfig, list[int], int | None]:
    """In a standby child: wait for its call; exit quietly if the server goes first."""
    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE_BYTES, 4)
    if not data or len(fds) not in (3, 4):
        os._exit(0)
    fields = json.loads(data)
    cfg = confine.CallConfig(**{**fields, "read_roots": tuple(fields["read_roots"])})
    return cfg, fds[:3], fds[3] if len(fds) == 4 else None


def _own_children() -> list[int]:
    pid = os.getpid()
    try:
        fd = os.open(f"/proc/{pid}/task/{pid}/children", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        data = b""
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    except OSError:
        return []
    finally:
        os.close(fd)
    return [int(word) for word in data.split()]
