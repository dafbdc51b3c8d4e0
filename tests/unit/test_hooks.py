"""The hook dispatcher: collapse, allow-list, checks, failures and quarantine, with stand-ins.

Third-party calls go to a stand-in sandbox answering from a table (the real trampoline is
covered in tests/security); builtins are real manifests called in-process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_runner.config import PluginsConfig, parse_config
from agent_runner.plugins import DirtyIntent, PluginManifest, RoundReport, SpawnDecision
from agent_runner.plugins.admission.verdict import Admission, AdmittedPlugin, Verdict
from agent_runner.plugins.parent.hooks import Hooks, SpawnVerdict, collapse
from agent_runner.plugins.parent.sandbox import CallRequest, CallResult
from tests.fakes import RecordedEvents

Answer = Callable[[CallRequest], CallResult]


def ok(value: Any) -> CallResult:
    return CallResult("ok", value, "", None, None, "")


def spawn(action: str = "proceed", defer_s: float = 0, reason: str = "") -> CallResult:
    return ok({"action": action, "defer_s": defer_s, "reason": reason})


def observe(events: list[Any] | None = None, transient: Any = None) -> CallResult:
    return ok({"events": events or [], "transient": transient})


class StandIn:
    """A sandbox that answers each call with `answers[(plugin, hook)]`."""

    def __init__(self, answers: dict[tuple[str, str], CallResult | Answer]) -> None:
        self.answers = answers
        self.calls: list[CallRequest] = []
        self.closed = False

    def call(self, request: CallRequest, timeout_s: float | None = None) -> CallResult:
        self.calls.append(request)
        answer = self.answers[(request.entry.partition(":")[0], str(request.hook))]
        return answer if isinstance(answer, CallResult) else answer(request)

    def close(self) -> None:
        self.closed = True

    def server_pids(self) -> tuple[int, ...]:
        return () if self.closed else (4242,)


def plugin(name: str, kinds: tuple[str, ...] = (), **families: tuple[str, ...]) -> AdmittedPlugin:
    hooks = {family: families.get(family, ()) for family in ("spawn", "dirty", "observe")}
    return AdmittedPlugin(
        name, name, "1.0", f"{name}:PLUGIN", None, "sha256:x", hooks, kinds, "full", {}
    )


def settings(**plugins: Any) -> PluginsConfig:
    document = {"schema_version": 1, "agent": {"command": ["true"], "parser": "none"}}
    return parse_config({**document, "plugins": plugins}, Path("/x.toml")).plugins


def hooks(
    *plugins: AdmittedPlugin,
    answers: dict[tuple[str, str], CallResult | Answer] | None = None,
    builtins: dict[str, PluginManifest] | None = None,
    events: RecordedEvents | None = None,
    dirty_handler: str = "builtin",
    heartbeat: Callable[[], None] = lambda: None,
    **config: Any,
) -> tuple[Hooks, StandIn, RecordedEvents]:
    box = StandIn(answers or {})
    events = events or RecordedEvents()
    verdicts = tuple(
        Verdict(p.name, "third-party", p.name, "1.0", "/site", "admitted") for p in plugins
    )
    dispatcher = Hooks(
        Admission(plugins, verdicts),
        settings(**config),
        box,  # type: ignore[arg-type]
        events,
        dirty_handler=dirty_handler,
        heartbeat=heartbeat,
        builtins=builtins or {},
    )
    return dispatcher, box, events


VIEW = {"round": 3, "last_round": None, "argv": ["agent"], "env_names": ["PATH"], "max_defer_s": 60}


# --- spawn hooks ------------------------------------------------------------------------------


def test_collapse_skip_beats_the_longest_defer_beats_proceed() -> None:
    short, long = SpawnVerdict("defer", 5, "a", "p:a"), SpawnVerdict("defer", 50, "b", "p:b")
    skip = SpawnVerdict("skip", 0, "c", "p:c")
    assert collapse([]) == SpawnVerdict()
    assert collapse([short, long]) is long
    assert collapse([short, skip, long]) is skip


def test_only_allowed_plugins_or_hooks_may_defer_or_skip() -> None:
    dispatcher, _, events = hooks(
        plugin("alpha", spawn=("wait", "stop")),
        plugin("beta", spawn=("wait",)),
        answers={
            ("alpha", "wait"): spawn("defer", 30, "later"),
            ("alpha", "stop"): spawn("skip", reason="no"),
            ("beta", "wait"): spawn("defer", 40, "beta later"),
        },
        spawn_override_allow=["alpha:wait", "beta"],
    )
    verdict = dispatcher.before_spawn(VIEW)
    assert verdict == SpawnVerdict("defer", 40, "beta later", "beta:wait")
    assert [(e["hook"], e["action"]) for e in events.of("plugin_spawn_override_ignored")] == [
        ("alpha:stop", "skip")
    ]
    assert [(e["hook"], e["action"], e["defer_s"]) for e in events.of("plugin_spawn_decision")] == [
        ("alpha:wait", "defer", 30),
        ("beta:wait", "defer", 40),
    ]


@pytest.mark.parametrize("defer_s", [0, 0.99, 60.5, 3600])
def test_a_defer_outside_1_to_max_defer_s_is_an_invalid_result(defer_s: float) -> None:
    dispatcher, _, events = hooks(
        plugin("alpha", spawn=("wait",)),
        answers={("alpha", "wait"): spawn("defer", defer_s)},
        spawn_override_allow=["alpha"],
        max_defer_s=60,
    )
    assert dispatcher.before_spawn(VIEW) == SpawnVerdict()
    (failed,) = events.of("hook_failed")
    assert (failed["hook"], failed["cause"]) == ("alpha:wait", "invalid_result")
    assert failed["detail"] == f"defer_s {defer_s:g} not in 1..60"
    assert not events.of("plugin_spawn_decision")


def test_spawn_hooks_see_the_view_and_their_own_settings() -> None:
    dispatcher, box, _ = hooks(
        plugin("alpha", spawn=("wait",)),
        answers={("alpha", "wait"): spawn()},
        settings={"alpha": {"start_hour": 9}, "other": {"x": 1}},
    )
    dispatcher.before_spawn(VIEW)
    (request,) = box.calls
    assert (request.family, request.hook, request.read_roots) == ("spawn", "wait", ())
    assert request.view == {**VIEW, "settings": {"start_hour": 9}}


# --- failures and quarantine ------------------------------------------------------------------


def test_each_failure_has_its_event_and_quarantine_comes_after_n_in_a_row() -> None:
    results = iter(
        [
            CallResult("timeout", None, "no result within 10 s", None, None, ""),
            spawn(),
            CallResult("sandbox_kill", None, "killed by the seccomp filter", "SIGSYS", None, ""),
            CallResult("oom", None, "MemoryError", None, None, ""),
            CallResult("raised", None, "ValueError: x", None, None, ""),
        ]
    )
    dispatcher, box, events = hooks(
        plugin("alpha", spawn=("wait",)),
        answers={("alpha", "wait"): lambda request: next(results)},
        quarantine_after=3,
        hook_timeout_s=10,
    )
    for _ in range(6):
        assert dispatcher.before_spawn(VIEW) == SpawnVerdict()
    # The success in the second call reset the count; the sixth call never happened.
    assert len(box.calls) == 5
    assert [e["cause"] for e in events.of("hook_failed")] == [
        "timeout",
        "sandbox_kill",
        "oom",
        "raised",
    ]
    assert events.of("plugin_call_timeout") == [
        {"event": "plugin_call_timeout", "hook": "alpha:wait", "timeout_s": 10}
    ]
    assert events.of("plugin_sandbox_kill") == [
        {"event": "plugin_sandbox_kill", "hook": "alpha:wait", "signal": "SIGSYS", "syscall": None}
    ]
    (quarantined,) = events.of("plugin_quarantined")
    assert quarantined["reason"] == "3 failed calls in a row; the last: alpha:wait raised"
    (row,) = dispatcher.state()
    assert (row["state"], row["failures"], row["reason"]) == (
        "quarantined",
        3,
        quarantined["reason"],
    )
    assert not dispatcher.has("spawn")


def test_each_state_shows_the_failures_as_they_are_then() -> None:
    raised = CallResult("raised", None, "ValueError: x", None, None, "")
    dispatcher, _, _ = hooks(
        plugin("alpha", spawn=("wait",)),
        answers={("alpha", "wait"): lambda request: raised},
        quarantine_after=2,
    )
    before = dispatcher.state()
    before[-1]["state"] = "changed by the caller"
    dispatcher.before_spawn(VIEW)
    once = dispatcher.state()
    dispatcher.before_spawn(VIEW)
    twice = dispatcher.state()
    assert [(r["state"], r["failures"]) for r in (before[-1], once[-1], twice[-1])] == [
        ("changed by the caller", 0),
        ("admitted", 1),
        ("quarantined", 2),
    ]
    assert "reason" not in once[-1] or once[-1]["reason"] is None


def test_a_valid_call_with_an_invalid_answer_is_not_a_success() -> None:
    """An ok call whose defer is out of range must not reset the count of failures."""
    answers = iter([CallResult("raised", None, "E", None, None, ""), spawn("defer", 0.5)] * 2)
    dispatcher, _, events = hooks(
        plugin("alpha", spawn=("wait",)),
        answers={("alpha", "wait"): lambda request: next(answers)},
        spawn_override_allow=["alpha"],
        quarantine_after=3,
    )
    for _ in range(3):
        dispatcher.before_spawn(VIEW)
    assert len(events.of("plugin_quarantined")) == 1


# --- round observers --------------------------------------------------------------------------


def test_observer_events_are_written_as_plugin_kind_and_undeclared_ones_dropped() -> None:
    events = RecordedEvents(plugin_kinds={"alpha.noted"})
    dispatcher, _, _ = hooks(
        plugin("alpha", ("noted",), observe=("watch",)),
        answers={
            ("alpha", "watch"): observe(
                [
                    ["noted", {"count": 3}],
                    ["sneaky", {"count": 4}],
                    ["noted", {"ts": "2000-01-01"}],
                    ["noted", {"kind": "x"}],
                ]
            )
        },
        events=events,
    )
    assert dispatcher.after_round({"round": 1}) == []
    assert events.of("alpha.noted") == [{"event": "alpha.noted", "count": 3}]
    (failed,) = events.of("hook_failed")
    assert failed["cause"] == "invalid_result"
    assert failed["detail"] == (
        "event kind 'sneaky' is not declared in the manifest; event field 'ts' is reserved; "
        "event field 'kind' is reserved"
    )


def test_an_observers_transient_is_returned_and_an_unknown_class_is_invalid() -> None:
    dispatcher, _, events = hooks(
        plugin("alpha", observe=("watch",)),
        plugin("beta", observe=("watch",)),
        answers={
            ("alpha", "watch"): observe(
                transient={"classification": "api_timeout", "reset_at": 10}
            ),
            ("beta", "watch"): observe(
                transient={"classification": "moon_phase", "reset_at": None}
            ),
        },
    )
    (transient,) = dispatcher.after_round({"round": 1})
    assert (transient.classification, transient.reset_at, transient.hook) == (
        "api_timeout",
        10.0,
        "alpha:watch",
    )
    (failed,) = events.of("hook_failed")
    assert (failed["hook"], failed["detail"]) == (
        "beta:watch",
        "unknown transient classification 'moon_phase'",
    )


# --- dirty handlers ---------------------------------------------------------------------------


def test_a_dirty_handler_gets_the_work_tree_for_its_call_and_its_intent_is_checked() -> None:
    dispatcher, box, events = hooks(
        plugin("alpha", dirty=("keep",)),
        answers={("alpha", "keep"): ok({"action": "commit", "message": "m", "paths": ["a.txt"]})},
    )

    def decide(problem: str | None) -> DirtyIntent | str:
        return dispatcher.decide_dirty(
            "alpha",
            {"round": 1, "files": ["a.txt"]},
            read_roots=(Path("/work"),),
            problem=lambda intent: problem,
        )

    assert decide(None) == DirtyIntent("commit", "m", ("a.txt",))
    assert box.calls[0].read_roots == (Path("/work"),)
    assert decide("path not among the dirty files: a.txt") == (
        "alpha:keep: path not among the dirty files: a.txt"
    )
    (failed,) = events.of("hook_failed")
    assert (failed["cause"], failed["detail"]) == (
        "invalid_result",
        "path not among the dirty files: a.txt",
    )


def test_a_dirty_handler_that_is_not_admitted_is_warned_at_boot_once() -> None:
    dispatcher, _, events = hooks(plugin("alpha", spawn=("wait",)), dirty_handler="alpha")
    assert not dispatcher.can_decide_dirty("alpha")
    assert not dispatcher.can_decide_dirty("ghost")
    assert not dispatcher.can_decide_dirty("ghost")
    assert [(e["name"], e["reason"]) for e in events.of("dirty_handler_unavailable")] == [
        ("alpha", "it has no dirty handler"),
        ("ghost", "no installed plugin has this name"),
    ]


def test_a_quarantined_dirty_handler_is_not_called() -> None:
    dispatcher, box, _ = hooks(
        plugin("alpha", dirty=("keep",)),
        answers={("alpha", "keep"): CallResult("crash", None, "x", None, None, "")},
        quarantine_after=1,
    )
    args: dict[str, Any] = {"read_roots": (), "problem": lambda intent: None}
    assert dispatcher.decide_dirty("alpha", {}, **args) == "alpha:keep failed"
    assert dispatcher.decide_dirty("alpha", {}, **args) == "alpha is quarantined"
    assert len(box.calls) == 1


# --- builtins, settings, the sandbox's lifetime -----------------------------------------------


def test_builtins_run_in_process_through_the_same_checks() -> None:
    def wait(view: Any) -> SpawnDecision:
        return SpawnDecision.defer(view.max_defer_s / 2, reason=f"round {view.round}")

    def broken(view: Any) -> RoundReport:
        raise RuntimeError("builtin bug")

    def liar(view: Any) -> object:
        return "not a result"

    manifest = PluginManifest(name="inside", spawn_hooks=(wait, liar), round_observers=(broken,))
    dispatcher, box, events = hooks(builtins={"inside": manifest}, spawn_override_allow=["inside"])
    assert dispatcher.before_spawn(VIEW) == SpawnVerdict("defer", 30, "round 3", "inside:wait")
    assert dispatcher.after_round({"round": 3}) == []
    assert [(e["hook"], e["cause"], e["detail"]) for e in events.of("hook_failed")] == [
        ("inside:liar", "invalid_result", "spawn hook returned str, not SpawnDecision"),
        ("inside:broken", "raised", "RuntimeError: builtin bug"),
    ]
    assert not box.calls


def test_the_sandbox_runs_only_while_a_third_party_plugin_is_admitted() -> None:
    none, idle, _ = hooks()
    assert idle.closed
    assert none.helper_pids() == ()
    some, busy, _ = hooks(plugin("alpha", spawn=("wait",)))
    assert not busy.closed
    assert some.helper_pids() == (4242,)
    some.close()
    assert busy.closed
    assert some.helper_pids() == ()


def test_the_sandbox_stops_once_every_third_party_plugin_is_quarantined() -> None:
    failing = CallResult("raised", None, "E", None, None, "")
    dispatcher, box, _ = hooks(
        plugin("alpha", spawn=("wait",)),
        plugin("beta", spawn=("wait",)),
        answers={("alpha", "wait"): failing, ("beta", "wait"): spawn()},
        quarantine_after=2,
    )
    for _ in range(3):
        dispatcher.before_spawn(VIEW)
    # alpha is quarantined; beta may still be called, so its fork server stays.
    assert not box.closed
    box.answers[("beta", "wait")] = failing
    dispatcher.before_spawn(VIEW)
    assert not box.closed
    dispatcher.before_spawn(VIEW)
    assert box.closed
    assert dispatcher.helper_pids() == ()
    assert [row["state"] for row in dispatcher.state()] == ["quarantined", "quarantined"]


def test_settings_for_a_plugin_that_is_not_admitted_are_warned_once() -> None:
    _, _, events = hooks(plugin("alpha"), settings={"alpha": {}, "ghost": {"a": 1}})
    assert events.of("plugin_settings_unused") == [
        {"event": "plugin_settings_unused", "name": "ghost"}
    ]


def test_the_watchdog_hears_from_serve_before_every_call() -> None:
    beats: list[int] = []
    dispatcher, box, _ = hooks(
        plugin("alpha", spawn=("one", "two"), observe=("watch",)),
        answers={
            ("alpha", "one"): spawn(),
            ("alpha", "two"): lambda request: (beats.append(-1), spawn())[1],
            ("alpha", "watch"): observe(),
        },
        heartbeat=lambda: beats.append(len(box.calls)),
    )
    dispatcher.before_spawn(VIEW)
    dispatcher.after_round({"round": 1})
    # A beat before each call: 0 calls made, then 1 (and the second call itself), then 2.
    assert beats == [0, 1, -1, 2]


def test_a_squatter_admitted_under_a_builtins_name_does_not_stand_for_the_builtin() -> None:
    def watch(view: Any) -> None:
        return None

    manifest = PluginManifest(name="builtin", round_observers=(watch,))
    dispatcher, box, events = hooks(
        plugin("builtin", observe=("watch",)),
        answers={("builtin", "watch"): CallResult("crash", None, "x", None, None, "")},
        builtins={"builtin": manifest},
    )
    dispatcher.after_round({"round": 1})
    # Both were called: the builtin in-process (fine), the squatter in the sandbox (failed).
    assert len(box.calls) == 1
    assert [e["cause"] for e in events.of("hook_failed")] == ["crash"]
