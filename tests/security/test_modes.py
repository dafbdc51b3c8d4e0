"""require / prefer / off: what boots, what is reported, and what a degraded host still enforces."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.errors import ConfinementUnavailable, ExitCode
from agent_runner.plugins.parent import forkclient
from agent_runner.plugins.parent.sandbox import CallResult, ProbeReport, Sandbox
from tests.fakes import RecordedEvents
from tests.security.conftest import NOOP, run_hook
from tests.security.harness import InProcess


@pytest.fixture
def without_seccomp_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch seccomp off the way a host without pyseccomp/libseccomp would: no binding."""
    real = forkclient._module_locations

    def locations(mode: str) -> dict[str, tuple[str, list[str] | None]]:
        found = real(mode)  # type: ignore[arg-type]
        found.pop("pyseccomp", None)
        return found

    monkeypatch.setattr(forkclient, "_module_locations", locations)


@pytest.fixture
def degraded(without_seccomp_binding: None) -> Iterator[tuple[Sandbox, RecordedEvents]]:
    events = RecordedEvents()
    sandbox = Sandbox("prefer", emit=events, hook_timeout_s=5.0)
    sandbox.start()
    yield sandbox, events
    sandbox.close()


def test_require_refuses_to_boot_without_seccomp(
    confined: InProcess, without_seccomp_binding: None
) -> None:
    events = RecordedEvents()
    sandbox = Sandbox("require", emit=events)
    with pytest.raises(ConfinementUnavailable) as raised:
        sandbox.start()
    assert raised.value.exit_code == ExitCode.CONFIG
    (event,) = events.of("plugin_sandbox_degraded")
    assert event["requested"] == "require"
    assert event["achieved_tier"] == "landlock"
    assert "seccomp" in event["reason"]


def test_prefer_reports_the_degraded_tier_once(degraded: tuple[Sandbox, RecordedEvents]) -> None:
    sandbox, events = degraded
    assert sandbox.report is not None
    assert sandbox.report.tier == "landlock"
    assert sandbox.report.seccomp is False
    assert sandbox.report.fs is True
    assert sandbox.report.unconfined_reason
    assert events.kinds().count("plugin_sandbox_degraded") == 1
    assert run_hook(sandbox, NOOP).status == "ok"
    assert events.kinds().count("plugin_sandbox_degraded") == 1


def test_landlock_tier_still_denies_files_and_tcp(degraded: tuple[Sandbox, RecordedEvents]) -> None:
    sandbox, _ = degraded
    body = """
    import socket
    def hook(view):
        out = []
        for attempt in (lambda: open("/etc/hostname").read(),
                        lambda: socket.create_connection(("127.0.0.1", 9), timeout=1)):
            try:
                attempt()
                out.append("allowed")
            except OSError as exc:
                out.append(str(exc.errno))
        return SpawnDecision.skip(" ".join(out))
    """
    result = run_hook(sandbox, body)
    assert result.status == "ok", result
    assert result.value["reason"] == "13 13"  # EACCES from Landlock for both


def test_off_runs_out_of_process_and_says_so(unconfined: InProcess) -> None:
    assert unconfined.report is not None
    assert unconfined.report.to_dict() == {
        "tier": "none",
        "landlock_abi": 0,
        "fs": False,
        "net": False,
        "scope": False,
        "seccomp": False,
        "unconfined_reason": "sandbox = off",
    }
    body = """
    def hook(view):
        return SpawnDecision.skip(str(os.getpid()))
    """
    result = run_hook(unconfined, body)
    assert result.status == "ok"
    assert int(result.value["reason"]) != __import__("os").getpid()


def test_off_self_test_reports_what_is_not_blocked(unconfined: InProcess) -> None:
    report = unconfined.self_test()
    assert report["fork"] is False
    assert report["exec"] is False
    assert report["unix_socket"] is False


def test_a_call_whose_landlock_rules_cannot_be_built_is_refused(confined: InProcess) -> None:
    body = """
    def hook(view):
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body, read_roots=(Path("/nonexistent/agent-runner-root"),))
    assert result.status == "crash", result
    assert "confinement failed" in result.detail


UNCONFINED_PROBE = """
import socket
def hook(view):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    return SpawnDecision.skip("ran unconfined")
"""


@pytest.mark.parametrize("mode", ["require", "prefer"])
def test_calls_before_start_are_refused(mode: str) -> None:
    sandbox = Sandbox(mode, emit=RecordedEvents())  # type: ignore[arg-type]
    result = run_hook(sandbox, UNCONFINED_PROBE)
    assert result.status == "crash", result
    assert "not started" in result.detail


def test_calls_after_a_refused_start_are_refused(
    confined: InProcess, without_seccomp_binding: None
) -> None:
    sandbox = Sandbox("require", emit=RecordedEvents())
    with pytest.raises(ConfinementUnavailable):
        sandbox.start()
    result = run_hook(sandbox, UNCONFINED_PROBE)
    assert result.status == "crash", result
    assert "not started" in result.detail


def test_a_call_racing_the_probe_never_runs_unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    racing: list[CallResult] = []
    probe = Sandbox._probe

    def call_then_probe(self: Sandbox) -> ProbeReport:
        # The fork server exists, the probe has not run: the window a concurrent call() hits.
        racing.append(run_hook(self, UNCONFINED_PROBE))
        return probe(self)

    monkeypatch.setattr(Sandbox, "_probe", call_then_probe)
    sandbox = Sandbox("require", emit=RecordedEvents())
    # On a host that cannot confine, start refuses; the racing call must be refused anyway.
    with sandbox, contextlib.suppress(ConfinementUnavailable):
        sandbox.start()
    (result,) = racing
    assert result.status == "crash", result
    assert "not started" in result.detail


def test_off_child_still_drops_every_capability(unconfined: InProcess) -> None:
    body = """
    def hook(view):
        fields = [line.split() for line in open("/proc/self/status")]
        wanted = {f[0].rstrip(":"): f[1] for f in fields if f and f[0][:3] in ("Cap", "NoN")}
        return SpawnDecision.skip(json.dumps(wanted))
    """
    result = run_hook(unconfined, body)
    assert result.status == "ok", result
    status = __import__("json").loads(result.value["reason"])
    assert status["NoNewPrivs"] == "1"
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[name], 16) == 0, (name, status)
