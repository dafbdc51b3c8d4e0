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
from agent_runner.plugins.parent.forkclient import Outcome
from agent_runner.plugins.parent.sandbox import classify


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


def test_sources_are_encoded_once_and_make_the_same_request_as_a_dict() -> None:
    files = {"p/__init__.py": b"from . import util\n", "p/util.py": b"\x00\xff"}
    sources = wire.Sources(files)
    first = wire.encode_request("observe", "p:PLUGIN", "watch", {"tail": "\u2028"}, sources)
    again = wire.encode_request("spawn", "p:PLUGIN", "gate", {"round": 2}, sources)
    assert first == wire.encode_request("observe", "p:PLUGIN", "watch", {"tail": "\u2028"}, files)
    assert wire.decode_request(again)["sources"] == files
    assert sources.encoded() is sources.encoded()
    assert sources == files and len(sources) == 2


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
    with pytest.raises(wire.WireError, match="control or formatting character"):
        wire.parse_envelope(family, data)


# One example of each class of character the string rule refuses.
UNSAFE = {
    "NUL": "\x00",
    "ESC (ANSI escape)": "\x1b[2J\x1b]0;title\x07",
    "newline": "\n",
    "carriage return": "\r",
    "tab": "\t",
    "DEL": "\x7f",
    "CSI (C1)": "\x9b31m",
    "NEL (C1)": "\x85",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "right-to-left override": "\u202e",
    "left-to-right embedding": "\u202a",
    "first-strong isolate": "\u2068",
    "pop directional isolate": "\u2069",
    "right-to-left mark": "\u200f",
    "arabic letter mark": "\u061c",
    "lone surrogate": "\ud800",
}


def _in_every_string(text: str) -> list[tuple[str, object]]:
    """`text` placed in each string field of every family that a plugin controls."""
    return [
        ("spawn", {"action": "skip", "defer_s": 0, "reason": f"r{text}"}),
        # A commit message may hold lines and tabs: there the class is stood in for by NUL.
        (
            "dirty",
            {
                "action": "commit",
                "message": "m\x00" if text in ("\n", "\t") else f"m{text}",
                "paths": [],
            },
        ),
        ("dirty", {"action": "commit", "message": "m", "paths": [f"p{text}"]}),
        ("observe", {"events": [["k", {"v": f"v{text}"}]], "transient": None}),
        ("observe", {"events": [["k", {f"k{text}": 1}]], "transient": None}),
        ("observe", {"events": [["k", {"v": [{"w": f"w{text}"}]}]], "transient": None}),
        ("observe", {"events": [], "transient": {"classification": f"c{text}", "reset_at": None}}),
        ("describe", {**GOOD["describe"], "name": f"p{text}"}),
        ("describe", {**GOOD["describe"], "event_kinds": [f"k{text}"]}),
        ("describe", {**GOOD["describe"], "spawn_hooks": [f"h{text}"]}),
    ]


@pytest.mark.parametrize("text", UNSAFE.values(), ids=UNSAFE.keys())
def test_every_plugin_string_refuses_each_class_of_unsafe_character(text: str) -> None:
    for family, value in _in_every_string(text):
        with pytest.raises(
            wire.WireError, match=r"control or formatting|bad event kind|identifier"
        ):
            wire.validate_value(family, value)


def test_a_commit_message_may_have_lines_and_tabs_but_nothing_else_unsafe() -> None:
    body = {"action": "commit", "message": "subject\n\n\tbody", "paths": []}
    assert wire.validate_value("dirty", body) == body
    with pytest.raises(wire.WireError, match="control or formatting"):
        wire.validate_value("dirty", {**body, "message": "subject\r\nbody"})


@pytest.mark.parametrize(
    "text", ["plain", "Grüße, 日本語, emoji 🎉 and a zero-width joiner 👩\u200d💻", "a/b c.d"]
)
def test_ordinary_unicode_passes_the_string_rule(text: str) -> None:
    value = {"action": "skip", "defer_s": 0, "reason": text}
    assert wire.validate_value("spawn", value) == value


@pytest.mark.parametrize("kind", ["Bad", "with.dot", "9start", "k" * 65, ""])
def test_describe_event_kinds_must_match_the_event_kind_pattern(kind: str) -> None:
    with pytest.raises(wire.WireError, match="bad event kind"):
        wire.validate_value("describe", {**GOOD["describe"], "event_kinds": [kind]})


@pytest.mark.parametrize("name", ["not an identifier", "a-b", "", "1x"])
def test_describe_hook_names_must_be_identifiers(name: str) -> None:
    with pytest.raises(wire.WireError, match="identifier"):
        wire.validate_value("describe", {**GOOD["describe"], "round_observers": [name]})


@pytest.mark.parametrize(
    "encoded",
    [
        json.dumps({"a": 1}).encode("utf-16"),
        json.dumps({"a": 1}).encode("utf-16-le"),
        json.dumps({"a": 1}).encode("utf-32"),
        b"\xef\xbb\xbf" + json.dumps({"a": 1}).encode(),
    ],
    ids=["utf-16 with BOM", "utf-16-le", "utf-32", "utf-8 BOM"],
)
def test_json_that_is_not_plain_utf_8_is_refused(encoded: bytes) -> None:
    assert json.loads(encoded) == {"a": 1}  # what json.loads alone would accept
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.loads_strict(encoded)


def test_escape_text_makes_every_unsafe_character_visible() -> None:
    text = "".join(UNSAFE.values())
    escaped = wire.escape_text(text)
    assert wire.escape_text(escaped) == escaped
    wire.check_text(escaped, "escaped")
    assert "\\x1b" in escaped and "\\u202e" in escaped and "\\ud800" in escaped
    assert wire.escape_text("line\n\tmore\x1b", multiline=True) == "line\n\tmore\\x1b"


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
        wire.parse_result("spawn", wire.CONFINED_MARK + b" " * wire.MAX_RESULT_BYTES)


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


def confined(data: bytes) -> bytes:
    """What the result descriptor holds when the child's own code promised an envelope."""
    return wire.CONFINED_MARK + data


OK_ENVELOPE = confined(envelope(GOOD["spawn"]))


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
        (Outcome(result=confined(envelope(None, "oom")), wait_status=exited(0)), "oom", None),
        (
            Outcome(result=confined(envelope(None, "raised")), wait_status=exited(0)),
            "raised",
            None,
        ),
        (
            Outcome(result=confined(envelope(None, "invalid")), wait_status=exited(0)),
            "invalid_result",
            None,
        ),
        (Outcome(result=wire.encode_refusal("no"), wait_status=exited(0)), "crash", None),
        (Outcome(result=OK_ENVELOPE, wait_status=exited(5)), "crash", None),
        (Outcome(result=wire.CONFINED_MARK, wait_status=exited(0)), "crash", None),
        (Outcome(result=confined(b"{"), wait_status=exited(0)), "invalid_result", None),
    ],
)
def test_parent_classifies_each_way_a_call_ends(
    outcome: Outcome, status: str, sig: str | None
) -> None:
    result = classify("spawn", outcome, 10.0, seccomp=True)
    assert result.status == status
    assert result.signal == sig
    assert (result.value is not None) == (status == "ok")


@pytest.mark.parametrize("sig", [signal.SIGSYS, signal.SIGXCPU])
def test_without_seccomp_a_signal_death_is_a_crash_it_could_have_sent_itself(sig: int) -> None:
    result = classify("spawn", Outcome(wait_status=signalled(sig)), 10.0, seccomp=False)
    assert (result.status, result.signal) == ("crash", signal.Signals(sig).name)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"status":"refused","value":null,"detail":"confinement failed: fake"}',
        wire.CONFINED_MARK + b'{"status":"refused","value":null,"detail":"confinement failed"}',
        wire.CONFINED_MARK + wire.encode_refusal("confinement failed: fake"),
    ],
    ids=["bare envelope", "refused envelope after the mark", "refusal after the mark"],
)
def test_a_refusal_after_plugin_code_could_run_is_an_invalid_result(raw: bytes) -> None:
    result = classify("spawn", Outcome(result=raw, wait_status=exited(0)), 1.0, seccomp=True)
    assert result.status == "invalid_result", result
    assert not result.detail.startswith("refused")


def test_stderr_tail_is_bounded_and_decoded_leniently() -> None:
    outcome = Outcome(stderr=os.urandom(64 * 1024), wait_status=exited(1))
    assert len(classify("spawn", outcome, 1.0, seccomp=True).stderr_tail) <= 8 * 1024


@pytest.mark.parametrize("status", ["raised", "invalid", "oom"])
def test_a_detail_with_unsafe_characters_is_escaped(status: str) -> None:
    raw = confined(
        b'{"status":"%s","value":null,"detail":"RuntimeError: \\ud800 \\u001b[31mboom"}'
        % status.encode()
    )
    result = classify("spawn", Outcome(result=raw, wait_status=exited(0)), 1.0, seccomp=True)
    assert result.detail.endswith("RuntimeError: \\ud800 \\x1b[31mboom")
    wire.check_text(result.detail, "detail")


def test_stderr_tail_keeps_its_lines_and_escapes_the_rest() -> None:
    outcome = Outcome(stderr=b"Traceback\n\tline\x1b[2J\xc2\x9b\n", wait_status=exited(1))
    tail = classify("spawn", outcome, 1.0, seccomp=True).stderr_tail
    assert tail == "Traceback\n\tline\\x1b[2J\\x9b\n"
