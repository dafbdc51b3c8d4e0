"""The event registry, redaction, the JSONL writer and the tail reader."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from agent_runner.errors import EventLogError
from agent_runner.events import (
    REGISTRY,
    EventLog,
    format_ts,
    iter_events,
    parse_line,
    redact,
    redact_argv,
    render_docs,
    tail_events,
)
from tests.fakes import FakeClock

DOCS = Path(__file__).parents[2] / "docs" / "events.md"
NOV_30 = 1_796_064_090.033  # 2026-11-30T18:41:30.033Z


def read_lines(log_dir: Path) -> list[str]:
    return (log_dir / "events-2026-11.jsonl").read_text().splitlines()


def make_log(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "logs", clock=FakeClock(wall=NOV_30))


def test_event_line_has_ts_kind_and_fields(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    log.emit("round_start", round=42)
    assert read_lines(log.log_dir) == [
        '{"ts":"2026-11-30T18:41:30.033Z","event":"round_start","round":42}'
    ]


def test_timestamp_is_utc_with_milliseconds() -> None:
    assert format_ts(NOV_30) == "2026-11-30T18:41:30.033Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", format_ts(0.0))


def test_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unregistered event kind 'round_started'"):
        make_log(tmp_path).emit("round_started", round=1)


def test_missing_or_extra_field_is_refused(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    with pytest.raises(ValueError, match=r"missing \['round'\]"):
        log.emit("round_start")
    with pytest.raises(ValueError, match=r"extra \['rounds'\]"):
        log.emit("round_start", round=1, rounds=2)


def test_plugin_kinds_are_namespaced_and_must_be_declared(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    with pytest.raises(ValueError, match="unregistered"):
        log.emit("my_plugin.tool_calls", count=3)
    log.allow_plugin_kinds("my_plugin", ("tool_calls",))
    log.emit("my_plugin.tool_calls", count=3)
    assert json.loads(read_lines(log.log_dir)[-1])["count"] == 3


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-api03-abcdefghijklmnopqrstuvwx",
        "sk-proj-ABCDEFGHIJKLMNOP1234",
        "Bearer eyJhbGciOiJIUzI1NiJ9.payload",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "AKIAABCDEFGHIJKLMNOP",
    ],
)
def test_secrets_are_redacted_in_every_field(tmp_path: Path, secret: str) -> None:
    assert secret not in redact(f"error: key {secret} rejected")
    log = make_log(tmp_path)
    log.emit("crash_loop", count=5, reason=f"401 with {secret}")
    log.emit("dirty_detected", round=1, files=[f"notes/{secret}.txt"], count=1)
    text = "\n".join(read_lines(log.log_dir))
    assert secret not in text
    assert text.count("[REDACTED]") == 2


def test_writer_starts_a_new_line_after_a_torn_last_line(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "events-2026-11.jsonl").write_text('{"ts":"x","event":"round_start","rou')
    log = EventLog(log_dir, clock=FakeClock(wall=NOV_30))
    log.emit("round_start", round=2)
    lines = read_lines(log_dir)
    assert len(lines) == 2
    assert json.loads(lines[1])["round"] == 2
    assert [e["round"] for e in iter_events(log_dir)] == [2]


def test_readers_skip_torn_and_malformed_lines(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "events-2026-10.jsonl").write_text(
        '{"event":"round_start","round":1}\nnot json\n[1,2]\n{"no_event":1}\n\x00\xff\n'
        '{"event":"round_end","round":1}\n{"event":"round_st'
    )
    assert [e["event"] for e in iter_events(log_dir)] == ["round_start", "round_end"]
    assert [e["event"] for e in tail_events(log_dir, 5)] == ["round_start", "round_end"]


def test_symlink_at_the_events_path_is_never_written_through(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (log_dir / "events-2026-11.jsonl").symlink_to(victim)
    log = EventLog(log_dir, clock=FakeClock(wall=NOV_30))
    with pytest.raises(EventLogError, match="symlink"):
        log._open("2026-11")
    log.emit("round_start", round=1)  # reported once on stderr, never raised into the loop
    assert victim.read_text() == "precious\n"
    assert tail_events(log_dir, 10) == []


def test_read_only_log_dir_is_a_clear_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores mode bits; a file where the directory should be is unwritable for anyone.
        (tmp_path / "logs").write_text("not a directory")
        match = "cannot create log_dir"
    else:
        (tmp_path / "logs").mkdir(mode=0o500)
        match = "not writable"
    with pytest.raises(EventLogError, match=match):
        EventLog(tmp_path / "logs")


def test_missing_log_dir_is_created(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "a" / "b", clock=FakeClock(wall=NOV_30))
    log.emit("round_start", round=1)
    assert (tmp_path / "a" / "b" / "events-2026-11.jsonl").exists()


def test_tail_reads_the_last_n_across_blocks_and_months(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    line = '{"event":"round_start","round":%d,"pad":"%s"}\n'
    with open(log_dir / "events-2026-10.jsonl", "w") as handle:
        handle.writelines(line % (i, "x" * 300) for i in range(2000))
    with open(log_dir / "events-2026-11.jsonl", "w") as handle:
        handle.writelines(line % (i, "y") for i in range(2000, 2003))
    assert [e["round"] for e in tail_events(log_dir, 5)] == [1998, 1999, 2000, 2001, 2002]
    assert [e["round"] for e in tail_events(log_dir, 1500)] == list(range(503, 2003))
    assert tail_events(log_dir, 0) == []


def test_tail_of_a_large_file_reads_only_its_end(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    path = log_dir / "events-2026-11.jsonl"
    with open(path, "wb") as handle:
        # A sparse 2 GiB prefix of zeros: reading it all would take seconds and gigabytes.
        handle.truncate(2 * 1024**3)
        handle.seek(0, os.SEEK_END)
        handle.write(b'\n{"event":"round_end","round":7}\n')
    assert tail_events(log_dir, 1) == [{"event": "round_end", "round": 7}]


def test_every_spec_kind_is_registered() -> None:
    spec_kinds = [
        "serve_start",
        "serve_stop",
        "config_broken",
        "round_start",
        "agent_spawn",
        "agent_exit",
        "round_timeout_kill",
        "round_leftovers_reaped",
        "round_orphan_reaped",
        "round_end",
        "round_deferred",
        "round_resumed",
        "round_skipped",
        "stop_requested",
        "config_reloaded",
        "config_reload_deferred",
        "config_reload_failed",
        "stop_file_detected",
        "max_rounds_reached",
        "transient_error_detected",
        "backoff_wait",
        "backoff_recovered",
        "agent_usage_recorded",
        "agent_auth_error_detected",
        "crash_loop",
        "stalled_no_progress",
        "auth_failed",
        "dirty_detected",
        "orphan_stashed",
        "orphan_idempotent_skip",
        "dirty_auto_committed",
        "dirty_ignored",
        "dirty_action_failed",
        "hook_failed",
        "plugin_admitted",
        "plugin_disabled",
        "plugin_refused",
        "plugin_builtin_name_squat",
        "plugin_checksum_mismatch",
        "plugin_sandbox_degraded",
        "plugin_sandbox_kill",
        "plugin_call_timeout",
        "plugin_quarantined",
        "plugin_spawn_decision",
        "plugin_spawn_override_ignored",
    ]
    assert set(spec_kinds) <= set(REGISTRY)


def test_events_doc_is_generated_from_the_registry() -> None:
    assert DOCS.read_text() == render_docs(), "run `make docs` to regenerate docs/events.md"


def test_tail_skips_a_huge_run_without_newlines_quickly(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    with open(log_dir / "events-2026-11.jsonl", "wb") as handle:
        handle.write(b'{"event":"round_start","round":1}\n{"event":"round_end","round":1}\n')
        handle.write(b"\x00" * (30 * 1024 * 1024))  # what a power cut can leave behind
        handle.write(b'\n{"event":"round_start","round":2}\n')
    started = time.monotonic()
    events = tail_events(log_dir, 3)
    assert [(e["event"], e["round"]) for e in events] == [
        ("round_start", 1),
        ("round_end", 1),
        ("round_start", 2),
    ]
    # Linear, not quadratic: the quadratic version took several seconds here.
    assert time.monotonic() - started < 2


def test_tail_reads_a_first_line_without_a_preceding_newline(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / "events-2026-11.jsonl").write_text('{"event":"a"}\n{"event":"b')
    assert [e["event"] for e in tail_events(log_dir, 5)] == ["a"]  # "b" is torn
    (log_dir / "events-2026-11.jsonl").write_text('{"event":"a"}\n{"event":"b"}\n')
    assert [e["event"] for e in tail_events(log_dir, 5)] == ["a", "b"]


def test_a_console_that_goes_away_does_not_stop_the_log(tmp_path: Path) -> None:
    def broken(_line: str) -> None:
        raise BrokenPipeError

    log = EventLog(tmp_path / "logs", clock=FakeClock(wall=NOV_30), echo=broken)
    log.emit("round_start", round=1)
    log.emit("round_start", round=2)
    assert [e["round"] for e in iter_events(log.log_dir)] == [1, 2]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["claude", "--api-key", "abc", "-p"], ["claude", "--api-key", "[REDACTED]", "-p"]),
        (["x", "--token=abc", "--model=o"], ["x", "--token=[REDACTED]", "--model=o"]),
        (["x", "--auth-header", "Basic z", "y"], ["x", "--auth-header", "[REDACTED]", "y"]),
        (
            ["aider", "--message", "fix the key parser"],
            ["aider", "--message", "fix the key parser"],
        ),
        (["x", "--password"], ["x", "--password"]),
    ],
)
def test_secret_flag_values_are_redacted_from_argv(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_undecodable_bytes_anywhere_in_an_event_are_written_as_escapes(tmp_path: Path) -> None:
    log = make_log(tmp_path)
    surrogate = os.fsdecode(b"filter=\xff\xfe")  # what git output decoded with fsdecode holds
    echoed: list[str] = []
    log.echo = echoed.append
    log.emit("dirty_action_failed", round=1, action="stash", reason=surrogate)
    log.emit("dirty_detected", round=1, files=[surrogate, "\ud800lone"], count=2)
    log.emit("serve_start", pid=1, version="x", work_dir=Path(surrogate), log_dir={surrogate: 1})
    raw = (log.log_dir / "events-2026-11.jsonl").read_bytes()
    lines = [json.loads(line) for line in raw.decode("utf-8").splitlines()]
    assert lines[0]["reason"] == "filter=\\xff\\xfe"
    assert lines[1]["files"] == ["filter=\\xff\\xfe", "\\ud800lone"]
    assert lines[2]["work_dir"] == "filter=\\xff\\xfe"
    assert lines[2]["log_dir"] == {"filter=\\xff\\xfe": 1}
    assert [json.loads(line)["event"] for line in echoed] == [
        "dirty_action_failed",
        "dirty_detected",
        "serve_start",
    ]


@pytest.mark.parametrize(
    "line",
    [
        b'{"event":"x","a":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"event":"x","a":' + b"[" * 40 + b"]" * 40 + b"}",
        b'{"event":"round_start","round":' + b"9" * 5000 + b"}",
        b'{"event":"round_start","round":1,"x":"\xff\xfe"}',
    ],
    ids=["recursion", "too_deep", "huge_int", "not_utf8"],
)
def test_a_line_no_writer_would_write_is_skipped_not_fatal(line: bytes) -> None:
    assert parse_line(line) is None


def test_an_event_nested_as_deep_as_real_ones_is_read() -> None:
    line = b'{"event":"x","a":' + b"[" * 10 + b"]" * 10 + b',"b":[' + b"{}," * 50 + b"{}]}"
    assert parse_line(line) is not None
