"""The trampoline's wire format: strict JSON, exact schemas, and how the parent reads an ending."""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_runner.plugins import DirtyIntent, PluginManifest, RoundReport, SpawnDecision, wire
from agent_runner.plugins.forkclient import Outcome
from agent_runner.plugins.sandbox import classify


@pytest.mark.parametrize(
    "text",
    ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400, '{"a": [NaN]}'],
)
def test_strict_json_refuses_non_finite_and_huge_numbers(text: str) -> None:
    with pytest.raises(wire.WireError):
        wire.loads_strict(text)


def test_strict_json_accepts_ordinary_numbers() -> None:
    assert wire.loads_strict("[1, -2, 3.5, 1e300, 18446744073709551615]") == [
        1,
        -2,
        3.5,
        1e300,
        18446744073709551615,
    ]


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '[{"b": {"a": 1, "a": 1}}]'])
def test_strict_json_refuses_duplicate_keys(text: str) -> None:
    with pytest.raises(wire.WireError, match="duplicate key"):
        wire.loads_strict(text)


def test_strict_json_reports_garbage_as_a_wire_error() -> None:
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.loads_strict(b"\xff\xfe")
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.loads_strict("[" * 100_000)


def test_request_round_trips_with_binary_sources() -> None:
    sources = {"p/__init__.py": b"PLUGIN = 1\n\xff", "p/util.py": b""}
    data = wire.encode_request("spawn", "p:PLUGIN", "hook", {"round": 3}, sources)
    request = wire.decode_request(data)
    assert request["sources"] == sources
    assert request["view"] == {"round": 3}
    assert (request["family"], request["entry"], request["hook"]) == ("spawn", "p:PLUGIN", "hook")


def test_request_with_an_unknown_family_is_refused() -> None:
    data = wire.encode_request("root", "p:PLUGIN", None, {}, {})
    with pytest.raises(wire.WireError, match="unknown family"):
        wire.decode_request(data)


def envelope(value: object, status: str = "ok") -> bytes:
    return json.dumps({"status": status, "value": value, "detail": ""}).encode()


GOOD = {
    "describe": {
        "name": "p",
        "spawn_hooks": ["a"],
        "dirty_handlers": [],
        "round_observers": ["b"],
        "event_kinds": ["k"],
    },
    "spawn": {"action": "defer", "defer_s": 600, "reason": "lunch"},
    "dirty": {"action": "commit", "message": "m", "paths": ["docs/a.md"]},
    "observe": {"events": [["tool_calls", {"count": 3}]], "transient": None},
}


@pytest.mark.parametrize("family", sorted(GOOD))
def test_good_results_pass_unchanged(family: str) -> None:
    assert wire.parse_envelope(family, envelope(GOOD[family])) == ("ok", GOOD[family], "")


@pytest.mark.parametrize("family", sorted(GOOD))
def test_an_extra_or_missing_key_is_invalid(family: str) -> None:
    extra = {**GOOD[family], "extra": 1}
    with pytest.raises(wire.WireError, match="extra"):
        wire.parse_envelope(family, envelope(extra))
    missing = dict(GOOD[family])
    missing.popitem()
    with pytest.raises(wire.WireError, match="missing"):
        wire.parse_envelope(family, envelope(missing))


@pytest.mark.parametrize(
    ("family", "value"),
    [
        ("spawn", {"action": "defer", "defer_s": 86400 * 8 + 1, "reason": ""}),
        ("spawn", {"action": "defer", "defer_s": True, "reason": ""}),
        ("spawn", {"action": "proceed", "defer_s": 0, "reason": "x" * 501}),
        ("dirty", {"action": "reset", "message": "", "paths": []}),
        ("dirty", {"action": "commit", "message": "", "paths": "docs"}),
        ("observe", {"events": [["k"]], "transient": None}),
        ("observe", {"events": [["k", {"n": 2**64}]], "transient": None}),
        ("observe", {"events": [["k", {"n": {"n": {}}}]] * 101, "transient": None}),
        ("observe", {"events": [], "transient": {"classification": "x", "reset_at": -1}}),
        ("observe", {"events": [], "transient": {"classification": "x"}}),
        ("describe", {**GOOD["describe"], "name": 3}),
    ],
)
def test_out_of_range_or_mistyped_values_are_invalid(family: str, value: object) -> None:
    with pytest.raises(wire.WireError):
        wire.parse_envelope(family, envelope(value))


@pytest.mark.parametrize(
    ("family", "raw"),
    [
        ("spawn", '{"action": "skip", "defer_s": 0, "reason": "\\ud800"}'),
        ("observe", '{"events": [["k", {"\\udfff": 1}]], "transient": null}'),
        ("observe", '{"events": [["k", {"v": ["\\ud800"]}]], "transient": null}'),
    ],
)
def test_lone_surrogates_are_invalid(family: str, raw: str) -> None:
    data = ('{"status": "ok", "value": ' + raw + ', "detail": ""}').encode()
    with pytest.raises(wire.WireError, match="Unicode"):
        wire.parse_envelope(family, data)


def test_deeply_nested_event_fields_are_invalid() -> None:
    fields: dict[str, object] = {}
    cursor = fields
    for _ in range(wire.MAX_DEPTH + 2):
        cursor["n"] = {}
        cursor = cursor["n"]  # type: ignore[assignment]
    value = {"events": [["k", fields]], "transient": None}
    with pytest.raises(wire.WireError, match="nested"):
        wire.parse_envelope("observe", envelope(value))


def test_a_result_over_the_cap_is_invalid_before_parsing() -> None:
    with pytest.raises(wire.WireError, match="larger than"):
        wire.parse_envelope("spawn", b" " * (wire.MAX_RESULT_BYTES + 1))


def test_failure_envelopes_carry_only_their_detail() -> None:
    data = json.dumps({"status": "raised", "value": {"x": 1}, "detail": "boom"}).encode()
    assert wire.parse_envelope("spawn", data) == ("raised", None, "boom")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@given(family=st.sampled_from(sorted(GOOD)), value=json_values, status=st.text(max_size=8))
def test_any_json_envelope_is_accepted_or_refused_with_a_wire_error(
    family: str, value: object, status: str
) -> None:
    data = json.dumps({"status": status, "value": value, "detail": ""}).encode()
    with contextlib.suppress(wire.WireError):
        wire.parse_envelope(family, data)


@given(data=st.binary(max_size=200))
def test_any_bytes_are_accepted_or_refused_with_a_wire_error(data: bytes) -> None:
    with contextlib.suppress(wire.WireError):
        wire.parse_envelope("spawn", data)


def hook(view: object) -> SpawnDecision:
    return SpawnDecision.proceed()


def test_child_side_conversions_match_the_schemas() -> None:
    manifest = PluginManifest(name="p", spawn_hooks=(hook,), event_kinds=("k",))
    described = wire.describe_manifest(manifest)
    assert wire.validate_value("describe", described)["spawn_hooks"] == ["hook"]
    spawn = wire.result_to_json("spawn", SpawnDecision.defer(5, reason="r"))
    assert spawn == {"action": "defer", "defer_s": 5.0, "reason": "r"}
    dirty = wire.result_to_json("dirty", DirtyIntent.commit("m", paths=["a"]))
    assert dirty == {"action": "commit", "message": "m", "paths": ["a"]}
    observed = wire.result_to_json("observe", RoundReport(events=[("k", {"n": 1})]))
    assert observed == {"events": [["k", {"n": 1}]], "transient": None}
    for family, value in (("spawn", spawn), ("dirty", dirty), ("observe", observed)):
        wire.validate_value(family, value)


def test_child_side_conversion_refuses_the_wrong_type() -> None:
    with pytest.raises(wire.WireError, match="not SpawnDecision"):
        wire.result_to_json("spawn", DirtyIntent.ignore("x"))
    with pytest.raises(wire.WireError, match="not a PluginManifest"):
        wire.describe_manifest(object())


def signalled(sig: int) -> int:
    return sig  # a wait status whose low 7 bits are the terminating signal


def exited(code: int) -> int:
    return code << 8


OK_ENVELOPE = envelope(GOOD["spawn"])


@pytest.mark.parametrize(
    ("outcome", "status", "sig"),
    [
        (Outcome(result=OK_ENVELOPE, wait_status=exited(0)), "ok", None),
        (Outcome(wait_status=signalled(signal.SIGSYS)), "sandbox_kill", "SIGSYS"),
        (Outcome(wait_status=signalled(signal.SIGSEGV)), "crash", "SIGSEGV"),
        (Outcome(wait_status=signalled(signal.SIGXCPU)), "timeout", "SIGXCPU"),
        (Outcome(timed_out=True, wait_status=signalled(signal.SIGKILL)), "timeout", None),
        (Outcome(oversized=True, wait_status=exited(0)), "invalid_result", None),
        (Outcome(server_died=True), "crash", None),
        (Outcome(wait_status=exited(0)), "crash", None),
        (Outcome(stderr=b"MemoryError\n", wait_status=exited(1)), "crash", None),
        (
            Outcome(stderr=b"MemoryError\n", wait_status=signalled(signal.SIGKILL)),
            "crash",
            "SIGKILL",
        ),
        (Outcome(result=envelope(None, "oom"), wait_status=exited(0)), "oom", None),
        (Outcome(result=envelope(None, "raised"), wait_status=exited(0)), "raised", None),
        (Outcome(result=envelope(None, "invalid"), wait_status=exited(0)), "invalid_result", None),
        (Outcome(result=envelope(None, "refused"), wait_status=exited(0)), "crash", None),
        (Outcome(result=OK_ENVELOPE, wait_status=exited(5)), "crash", None),
        (Outcome(result=b"{", wait_status=exited(0)), "invalid_result", None),
    ],
)
def test_parent_classifies_each_way_a_call_ends(
    outcome: Outcome, status: str, sig: str | None
) -> None:
    result = classify("spawn", outcome, 10.0)
    assert result.status == status
    assert result.signal == sig
    assert (result.value is not None) == (status == "ok")


def test_stderr_tail_is_bounded_and_decoded_leniently() -> None:
    outcome = Outcome(stderr=os.urandom(64 * 1024), wait_status=exited(1))
    assert len(classify("spawn", outcome, 1.0).stderr_tail) <= 8 * 1024


@pytest.mark.parametrize("status", ["raised", "invalid", "refused", "oom"])
def test_a_detail_with_a_lone_surrogate_is_made_encodable(status: str) -> None:
    raw = b'{"status":"%s","value":null,"detail":"RuntimeError: \\ud800 boom"}' % status.encode()
    result = classify("spawn", Outcome(result=raw, wait_status=exited(0)), 1.0)
    assert "boom" in result.detail
    result.detail.encode("utf-8")
