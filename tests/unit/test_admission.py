"""Admission's order and verdicts, with hand-made installs and a stand-in for the sandbox."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from agent_runner.config import PluginsConfig, parse_config
from agent_runner.plugins import wire
from agent_runner.plugins.admission.discovery import discover
from agent_runner.plugins.admission.trust import running_package
from agent_runner.plugins.admission.verdict import admit
from agent_runner.plugins.parent.sandbox import CallRequest, CallResult, ProbeReport
from tests.fakes import RecordedEvents

FULL = ProbeReport("full", 7, True, True, True, True, None)


def install(site: Path, name: str) -> None:
    """A plugin distribution `name` with one module, written the way an installer would."""
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"PLUGIN = None\n",
        f"{info}/entry_points.txt": f"[agent_runner.plugins]\n{name} = {name}:PLUGIN\n".encode(),
        f"{info}/METADATA": f"Name: {name}\nVersion: 1.0\n".encode(),
    }
    rows = []
    for path, data in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_bytes(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}\n")
    (site / info / "RECORD").write_text("".join(rows) + f"{info}/RECORD,,\n")


class StandIn:
    """Answers describe calls from a table; a name mapped to an exception raises it."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.report = FULL
        self.answers = answers
        self.calls: list[CallRequest] = []
        self.timeouts: list[float | None] = []

    def call(self, request: CallRequest, timeout_s: float | None = None) -> CallResult:
        self.calls.append(request)
        self.timeouts.append(timeout_s)
        answer = self.answers[request.entry.partition(":")[0]]
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]


def described(name: str, **families: list[str]) -> CallResult:
    value = {"name": name, "spawn_hooks": [], "dirty_handlers": [], "round_observers": []}
    value |= families
    return CallResult("ok", {**value, "event_kinds": []}, "", None, None, "")


def settings(**plugins: Any) -> PluginsConfig:
    document = {"schema_version": 1, "agent": {"command": ["true"], "parser": "none"}}
    return parse_config({**document, "plugins": plugins}, Path("/x.toml")).plugins


def run(site: Path, box: StandIn, **plugins: Any) -> tuple[Any, RecordedEvents]:
    """Admit what `site` holds; `plugins` is the [plugins] table."""
    events = RecordedEvents()
    admission = admit(
        discover([site]),
        settings(**plugins),
        box,  # type: ignore[arg-type]
        events,
        package=running_package(),
    )
    return admission, events


def test_an_unexpected_failure_refuses_that_plugin_and_the_next_is_admitted(tmp_path: Path) -> None:
    install(tmp_path, "alpha")
    install(tmp_path, "beta")
    sandbox = StandIn(
        {"alpha": RuntimeError("boom"), "beta": described("beta", spawn_hooks=["gate"])}
    )
    admission, events = run(tmp_path, sandbox)
    assert [(e["name"], e["reason"]) for e in events.of("plugin_refused")] == [
        ("alpha", "could not be checked: RuntimeError: boom")
    ]
    (beta,) = admission.admitted
    assert (beta.name, beta.families["spawn"], beta.tier) == ("beta", ("gate",), "full")
    assert beta.sources == {"beta/__init__.py": b"PLUGIN = None\n"}
    assert isinstance(beta.sources, wire.Sources)  # encoded once for all its calls
    request = beta.request("spawn", "gate", {"round": 1})
    assert (request.family, request.entry, request.hook, request.sources) == (
        "spawn",
        "beta:PLUGIN",
        "gate",
        beta.sources,
    )
    states = {v.name: v.state for v in admission.verdicts}
    assert states == {"builtin": "builtin", "alpha": "refused", "beta": "admitted"}


def test_the_describe_call_carries_the_verified_bytes_and_a_bounded_deadline(
    tmp_path: Path,
) -> None:
    install(tmp_path, "alpha")
    sandbox = StandIn({"alpha": described("alpha")})
    run(tmp_path, sandbox, hook_timeout_s=120)
    (request,) = sandbox.calls
    assert sandbox.timeouts == [5.0]
    assert (request.family, request.entry, request.hook) == ("describe", "alpha:PLUGIN", None)
    assert dict(request.sources) == {"alpha/__init__.py": b"PLUGIN = None\n"}


def test_nothing_is_described_for_disabled_unpinned_under_require_or_mismatched(
    tmp_path: Path,
) -> None:
    for name in ("alpha", "beta", "gamma"):
        install(tmp_path, name)
    sandbox = StandIn({})
    admission, events = run(
        tmp_path,
        sandbox,
        sandbox="require",
        disable=["alpha"],
        pin={"gamma": "sha256:" + "0" * 64, "delta": "sha256:" + "1" * 64},
    )
    assert sandbox.calls == []
    assert admission.admitted == ()
    assert events.kinds() == [
        "plugin_disabled",
        "plugin_refused",
        "plugin_checksum_mismatch",
        "plugin_pin_unused",
    ]
    assert [e["name"] for e in events.events] == ["alpha", "beta", "gamma", "delta"]


def test_hook_names_and_event_kinds_are_checked_after_the_schema(tmp_path: Path) -> None:
    install(tmp_path, "alpha")
    install(tmp_path, "beta")
    twice = described("alpha", spawn_hooks=["gate", "gate"])
    bad_kind = CallResult(
        "ok",
        {**described("beta").value, "event_kinds": ["Bad-Kind"]},
        "",
        None,
        None,
        "",
    )
    _, events = run(tmp_path, StandIn({"alpha": twice, "beta": bad_kind}))
    assert [(e["name"], e["reason"]) for e in events.of("plugin_refused")] == [
        ("alpha", "two spawn hooks share a name; each must be distinct"),
        ("beta", "event kind 'Bad-Kind' is not lowercase letters, digits and _"),
    ]
