"""Hostile plugins run through the real trampoline on the real kernel, in both modes.

Every sandbox fixture runs each test twice: with the supervisor as root, and as an unused
non-root uid (`harness.AsUser`, the `systemctl --user` case). On a host that can confine
(Landlock in the kernel, or AGENT_RUNNER_REQUIRE_CONFINEMENT=1) these fail, never skip,
when the sandbox does not engage.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL, Popen, run
from typing import Any

import pytest

from agent_runner.errors import ConfinementUnavailable
from agent_runner.plugins.parent.sandbox import CallRequest, CallResult, Sandbox
from tests import unprivileged
from tests.integration.conftest import Project, create_project, stop_children
from tests.security import harness
from tests.security.harness import InProcess

SECRET_NAME = "AGENT_RUNNER_TEST_API_KEY"
SECRET_VALUE = "sk-test-5f1c0a9d7e3b"
REQUIRE_CONFINEMENT = os.environ.get("AGENT_RUNNER_REQUIRE_CONFINEMENT") == "1"


def host_offers_landlock() -> bool:
    """The kernel answers the Landlock ABI query (syscall 444 with LANDLOCK_CREATE_RULESET_VERSION)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return bool(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) >= 1)


def require_landlock(missing: str = "no Landlock in this kernel") -> None:
    """Fail where AGENT_RUNNER_REQUIRE_CONFINEMENT=1 asks for Landlock and the kernel has none;
    skip, saying `missing`, where it does not ask."""
    if not host_offers_landlock():
        if REQUIRE_CONFINEMENT:
            pytest.fail("AGENT_RUNNER_REQUIRE_CONFINEMENT=1 but the kernel offers no Landlock")
        pytest.skip(missing)


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
    sandbox: InProcess | Sandbox,
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


def _start(mode: harness.Mode, sandbox_mode: str) -> InProcess:
    os.environ[SECRET_NAME] = SECRET_VALUE
    sandbox = harness.create(mode, sandbox_mode, hook_timeout_s=5.0)
    try:
        sandbox.start()
    except ConfinementUnavailable as exc:
        sandbox.close()
        # A host whose kernel offers Landlock must confine: there, degradation is a failure.
        if REQUIRE_CONFINEMENT or host_offers_landlock():
            pytest.fail(f"this host can confine but the sandbox is degraded: {exc}")
        pytest.skip(f"no Landlock in this kernel, nothing to attack: {exc}")
    return sandbox


@pytest.fixture(scope="module", params=harness.MODES)
def confined(request: pytest.FixtureRequest) -> Iterator[InProcess]:
    """A require-mode sandbox; after every test in the module a normal call still succeeds."""
    sandbox = _start(request.param, "require")
    yield sandbox
    try:
        assert run_hook(sandbox, NOOP).status == "ok"
    finally:
        sandbox.close()


@pytest.fixture(scope="module", params=harness.MODES)
def unconfined(request: pytest.FixtureRequest) -> Iterator[InProcess]:
    """An off-mode sandbox: out of process, limits and deadlines, but no Landlock or seccomp."""
    sandbox = _start(request.param, "off")
    yield sandbox
    try:
        assert run_hook(sandbox, NOOP).status == "ok"
    finally:
        sandbox.close()


@pytest.fixture(params=harness.MODES)
def fresh(request: pytest.FixtureRequest) -> Iterator[InProcess]:
    """A sandbox of its own, for tests that break the fork server or fill the scratch root."""
    sandbox = _start(request.param, "require")
    yield sandbox
    sandbox.close()


@pytest.fixture
def shared_dir(confined: InProcess) -> Iterator[Path]:
    """A directory the plugin's uid owns, as a work tree under a user's supervisor is.

    Tests pass it as a read root or leave it outside every root; since the plugin's uid owns
    it, ordinary permissions never stand in for the sandbox in what is refused.
    """
    path = Path(tempfile.mkdtemp(prefix="agent-runner-shared-"))
    path.chmod(0o755)
    os.chown(path, confined.child_uid, confined.child_uid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Served:
    """A project and the way its serve runs: as root, or as an unused uid that owns it."""

    project: Project
    mode: harness.Mode
    uid: int  # the supervisor's

    @property
    def child_uid(self) -> int:
        """The uid plugin code runs as."""
        return harness.NOBODY if self.mode == "root" else self.uid

    def argv(self, site: Path, *args: str) -> list[str]:
        launch = ("tests.launch_serve", str(site), str(self.project.config_path), *args)
        if self.mode == "root":
            return [sys.executable, "-m", *launch]
        # The operator's own config, which the test wrote as root.
        self.own(self.project.config_path)
        return unprivileged.command(*launch, uid=self.uid)

    def start(self, site: Path, *args: str, env: dict[str, str] | None = None) -> Popen[bytes]:
        """serve in the background; the fixture stops it."""
        proc = Popen(
            self.argv(site, *args),
            cwd=unprivileged.REPO,
            env={**os.environ, **(env or {})},
            stdout=DEVNULL,
            stderr=DEVNULL,
        )
        self.project.children.append(proc)
        return proc

    def run(self, site: Path, *args: str) -> None:
        """serve to its end, which must be exit 0."""
        done = run(
            self.argv(site, *args),
            cwd=unprivileged.REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr

    def own(self, *paths: Path) -> None:
        """Hand `paths` (and everything under them) to the supervisor's uid."""
        for path in paths:
            for entry in [path, *path.rglob("*")]:
                os.chown(entry, self.uid, self.uid, follow_symlinks=False)


@pytest.fixture(params=harness.MODES)
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    """A project that plugin code could read and write were it not confined, in both modes.

    pytest's own tmp folders are 0700 root: there ordinary permissions would refuse a plugin
    before the sandbox is even asked. This one is world-traversable, its work tree writable
    by the plugin's uid, and under a user's supervisor owned by that user.
    """
    root = Path(tempfile.mkdtemp(prefix="agent-runner-public-"))
    root.chmod(0o755)
    project = create_project(root)
    mode: harness.Mode = request.param
    uid = 0 if mode == "root" else unprivileged.unused_uid()
    project.work_dir.chmod(0o777)
    served_project = Served(project, mode, uid)
    if mode != "root":
        served_project.own(root)
    try:
        yield served_project
        # serve made its log_dir: it ran as the uid this mode says, not as the test.
        assert project.log_dir.stat().st_uid == uid
    finally:
        stop_children(project)
        shutil.rmtree(root, ignore_errors=True)


def expect_full_tier(project: Project) -> None:
    """Every admitted plugin ran at the full tier; a host that can confine must, never skip."""
    tiers = {event["tier"] for event in project.events("plugin_admitted")}
    if tiers != {"full"}:
        if REQUIRE_CONFINEMENT or host_offers_landlock():
            pytest.fail(f"this host can confine but plugins were admitted at tiers {tiers}")
        pytest.skip(f"no Landlock in this kernel, nothing to attack: tiers {tiers}")
