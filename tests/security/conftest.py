"""Hostile plugins run through the real trampoline on the real kernel.

On a host that can confine, these fail (never skip) when AGENT_RUNNER_REQUIRE_CONFINEMENT=1.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_runner.errors import ConfinementUnavailable
from agent_runner.plugins.sandbox import CallRequest, CallResult, Sandbox
from tests.fakes import RecordedEvents

SECRET_NAME = "AGENT_RUNNER_TEST_API_KEY"
SECRET_VALUE = "sk-test-5f1c0a9d7e3b"
REQUIRE_CONFINEMENT = os.environ.get("AGENT_RUNNER_REQUIRE_CONFINEMENT") == "1"
HEADER = """\
import ctypes, errno, json, os, signal, time
from agent_runner.plugins import DirtyIntent, PluginManifest, RoundReport, SpawnDecision
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
"""


def plugin_sources(body: str, name: str = "hostile") -> dict[str, bytes]:
    """A real plugin package whose module defines `hook` (in `body`) and PLUGIN."""
    manifest = (
        f"\nPLUGIN = PluginManifest(name={name!r}, spawn_hooks=(hook,),"
        " dirty_handlers=(hook,), round_observers=(hook,))\n"
    )
    text = HEADER + textwrap.dedent(body) + manifest
    return {f"{name}/__init__.py": text.encode()}


def run_hook(
    sandbox: Sandbox,
    body: str,
    *,
    family: str = "spawn",
    timeout_s: float = 5.0,
    view: dict[str, Any] | None = None,
    read_roots: tuple[Path, ...] = (),
) -> CallResult:
    """Call `hook` from `body` in a confined child and return how it ended."""
    full_view = {"round": 1, "parent_pid": os.getpid(), "settings": {}, **(view or {})}
    request = CallRequest(
        family,  # type: ignore[arg-type]
        plugin_sources(body),
        "hostile:PLUGIN",
        "hook",
        full_view,
        read_roots,
    )
    return sandbox.call(request, timeout_s)


NOOP = """
def hook(view):
    return SpawnDecision.proceed()
"""


def _start(mode: str) -> tuple[Sandbox, RecordedEvents]:
    os.environ[SECRET_NAME] = SECRET_VALUE
    events = RecordedEvents()
    sandbox = Sandbox(mode, emit=events, hook_timeout_s=5.0)  # type: ignore[arg-type]
    try:
        sandbox.start()
    except ConfinementUnavailable as exc:
        if REQUIRE_CONFINEMENT:
            pytest.fail(f"AGENT_RUNNER_REQUIRE_CONFINEMENT=1 but the sandbox is degraded: {exc}")
        pytest.skip(f"this host cannot confine plugins: {exc}")
    return sandbox, events


@pytest.fixture(scope="module")
def confined() -> Iterator[Sandbox]:
    """A require-mode sandbox; after every test in the module a normal call still succeeds."""
    sandbox, _ = _start("require")
    yield sandbox
    try:
        assert run_hook(sandbox, NOOP).status == "ok"
    finally:
        sandbox.close()


@pytest.fixture(scope="module")
def unconfined() -> Iterator[Sandbox]:
    """An off-mode sandbox: out of process, limits and deadlines, but no Landlock or seccomp."""
    sandbox, _ = _start("off")
    yield sandbox
    try:
        assert run_hook(sandbox, NOOP).status == "ok"
    finally:
        sandbox.close()


@pytest.fixture
def fresh() -> Iterator[tuple[Sandbox, RecordedEvents]]:
    """A sandbox of its own, for tests that break the fork server."""
    sandbox, events = _start("require")
    yield sandbox, events
    sandbox.close()
