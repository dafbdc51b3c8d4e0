"""Child side, once confined: import the plugin from its verified bytes and call one hook.

`run_request` turns one request (a hook call, the probe or a self-test) into one result
envelope and never raises. Plugin code is compiled from the request's bytes, never from disk.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import socket
import sys
import traceback
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from agent_runner.plugins import wire

_libc = ctypes.CDLL(None, use_errno=True)
# Built before any plugin runs: reporting an exhausted address space must not need memory.
OOM_ENVELOPE = wire.encode_envelope("oom", detail="MemoryError")


class View:
    """The read-only object a hook receives: attribute access over the call's JSON view."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", dict(data))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("the view is read-only")

    def get(self, key: str, default: Any = None) -> Any:
        """The value for `key`, or `default`."""
        return self._data.get(key, default)


class SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports plugin modules from the verified in-memory sources, never from disk."""

    def __init__(self, sources: Mapping[str, bytes]) -> None:
        self._sources = dict(sources)

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        base = fullname.replace(".", "/")
        for relative, is_package in ((f"{base}/__init__.py", True), (f"{base}.py", False)):
            if relative in self._sources:
                spec = importlib.util.spec_from_loader(
                    fullname, self, origin=f"<plugin>/{relative}", is_package=is_package
                )
                if spec is not None and is_package:
                    spec.submodule_search_locations = []
                return spec
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        assert spec is not None
        assert spec.origin is not None
        source = self._sources[spec.origin.removeprefix("<plugin>/")]
        code = compile(source, spec.origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - this is the confined child's whole purpose

    def get_source(self, fullname: str) -> str | None:
        """Source text for tracebacks."""
        base = fullname.replace(".", "/")
        for relative in (f"{base}/__init__.py", f"{base}.py"):
            if relative in self._sources:
                return self._sources[relative].decode("utf-8", "replace")
        return None


def run_request(  # noqa: PLR0911 - one return per way a call can end
    request: Mapping[str, Any], applied: dict[str, bool], abi: int, notes: list[str]
) -> bytes:
    """Import the plugin from the request's sources and call the hook: the result envelope."""
    family = request["family"]
    if family == "probe":
        return wire.encode_envelope("ok", _probe(applied, abi, notes))
    if family == "selftest":
        return _selftest(str(request["hook"]), request["view"])
    sys.meta_path.insert(0, SourceFinder(request["sources"]))
    try:
        module_name, _, attribute = str(request["entry"]).partition(":")
        manifest = getattr(importlib.import_module(module_name), attribute or "PLUGIN")
        if family == "describe":
            result: Any = manifest
        else:
            result = _find_hook(manifest, family, request["hook"])(View(request["view"]))
    except MemoryError:
        return OOM_ENVELOPE
    except BaseException as exc:
        traceback.print_exc()
        return wire.encode_envelope("raised", detail=f"{type(exc).__name__}: {exc}"[:500])
    try:
        if family == "describe":
            value = wire.describe_manifest(result)
        else:
            value = wire.result_to_json(family, result)
        wire.validate_value(family, value)
        return wire.encode_envelope("ok", value)
    except MemoryError:
        return OOM_ENVELOPE
    except Exception as exc:
        return wire.encode_envelope("invalid", detail=f"{type(exc).__name__}: {exc}"[:500])


def _find_hook(manifest: Any, family: str, name: Any) -> Callable[[Any], Any]:
    attribute = {"spawn": "spawn_hooks", "dirty": "dirty_handlers", "observe": "round_observers"}
    for hook in getattr(manifest, attribute[family], ()):
        if getattr(hook, "__name__", None) == name:
            return hook  # type: ignore[no-any-return]
    raise LookupError(f"no {family} hook named {name!r}")


def _probe(applied: dict[str, bool], abi: int, notes: list[str]) -> dict[str, Any]:
    """What this child can prove is enforced on itself."""
    checks = dict(applied)
    if applied["fs"]:
        # Reading the root directory is outside every rule: it must be refused.
        checks["fs"] = _blocked(lambda: os.listdir("/"))[0]
    if applied["seccomp"]:
        checks["seccomp"] = _blocked(lambda: socket.socket(socket.AF_UNIX).close())[0]
    return {"landlock_abi": abi, **checks, "notes": wire.escape_text("; ".join(notes))[:2000]}


def _blocked(operation: Callable[[], object]) -> tuple[bool, str]:
    try:
        operation()
    except PermissionError as exc:
        return True, f"{type(exc).__name__}: {exc}"
    except OSError as exc:
        blocked = exc.errno in (errno.EPERM, errno.EACCES, errno.ENOSYS)
        return blocked, f"{type(exc).__name__}: {exc}"
    return False, "succeeded"


def _selftest(operation: str, view: Mapping[str, Any]) -> bytes:
    target = str(view.get("outside_file", "/etc/hostname"))
    parent = int(view.get("parent_pid", os.getppid()))
    operations: dict[str, Callable[[], object]] = {
        "read_outside": lambda: open(target, "rb").close(),
        "write_outside": lambda: open(target + ".w", "wb").close(),
        "read_parent_environ": lambda: open(f"/proc/{parent}/environ", "rb").close(),
        "tcp_connect": _tcp_connect,
        "unix_socket": lambda: socket.socket(socket.AF_UNIX).close(),
        "signal_parent": lambda: os.kill(parent, 0),
        "ptrace": lambda: _ptrace_attach(parent),
        "exec": lambda: os.execv("/bin/true", ["true"]),  # noqa: S606 - the probe itself
        "fork": _fork_and_reap,
        "chmod": lambda: os.chmod(_scratch_file(), 0o777),  # noqa: S103 - the probe itself
    }
    if operation not in operations:
        return wire.encode_envelope("invalid", detail=f"unknown self-test {operation!r}")
    blocked, detail = _blocked(operations[operation])
    if operation == "tcp_connect" and "Connection refused" in detail:
        blocked = False  # the kernel let the connect through; nothing happened to listen
    return wire.encode_envelope(
        "ok", {"blocked": blocked, "detail": wire.escape_text(detail)[:500]}
    )


def _tcp_connect() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        sock.connect(("127.0.0.1", 9))


def _ptrace_attach(pid: int) -> None:
    if _libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _fork_and_reap() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _scratch_file() -> str:
    path = os.path.join(os.environ.get("TMPDIR", "."), "selftest-chmod")
    with open(path, "wb"):
        pass
    return path
