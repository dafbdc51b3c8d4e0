"""The parser registry, bounded tail reading, event reporting, presets, and never crashing."""

from __future__ import annotations

import math
import os
import tempfile
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_runner.parsers import (
    PARSER_NAMES,
    TAIL_BYTES,
    TRANSIENT_CLASSES,
    Findings,
    Transient,
    Usage,
    parse_tail,
    parse_transcript,
    report_findings,
)
from agent_runner.parsers.findings import pick_transient
from agent_runner.parsers.signals import MAX_DETAIL_CHARS, short_redacted
from agent_runner.parsers.tail import last_lines, read_tail
from agent_runner.patterns import compile_patterns
from agent_runner.presets import preset_names
from tests.fakes import RecordedEvents

NOW = 1_800_000_000.0
FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"
LIMIT = FIXTURES / "claude" / "rate_limit_five_hour.jsonl"
# What the generic parser reads in the properties below: every kind, every group.
PATTERNS = compile_patterns(
    {
        "rate_limit": r"(?i)rate.limit.*?(?:in|after) (?P<reset>\S+)",
        "quota": r"(?i)quota.*?resets (?P<reset>[^.]+)",
        "outage": r"\b5\d\d\b",
        "auth": r"(?i)invalid api key",
        "setup": r"(?i)unknown model",
        "usage": r"(?P<input_tokens>[\d,]+) in(?: (?P<output_tokens>[\d,]+) out)?"
        r"(?: \$(?P<cost_usd>\S+))?(?: (?P<model>\w+))?",
    }
)


def test_every_shipped_parser_is_registered() -> None:
    assert {"claude", "codex", "gemini", "aider", "opencode", "qwen", "copilot"} <= PARSER_NAMES
    assert {"demo", "generic", "text", "none"} <= PARSER_NAMES


def test_unknown_parser_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        parse_transcript("claude-code", LIMIT, now=NOW)


@pytest.mark.parametrize("parser", sorted(PARSER_NAMES))
def test_missing_or_unreadable_transcript_finds_nothing(parser: str, tmp_path: Path) -> None:
    assert parse_transcript(parser, tmp_path / "absent.log", now=NOW) == Findings()
    assert parse_transcript(parser, tmp_path, now=NOW) == Findings()


def test_none_parser_ignores_even_a_rate_limit() -> None:
    assert parse_transcript("none", LIMIT, now=NOW) == Findings()


def test_tail_of_a_small_file_is_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    path.write_bytes(b"first\nsecond\n")
    assert read_tail(path, 1024) == b"first\nsecond\n"


def test_tail_drops_the_partial_first_line(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    path.write_bytes(b"a" * 100 + b"\nkept line\n")
    assert read_tail(path, 15) == b"kept line\n"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"a", b"bc", b"\n"]), max_size=400).map(b"".join),
    st.integers(0, 900),
    st.integers(0, 900),
)
def test_a_shorter_tail_cut_from_a_longer_one_is_what_reading_it_gives(
    content: bytes, first: int, second: int
) -> None:
    short, long = sorted((first, second))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.log"
        path.write_bytes(content)
        assert last_lines(read_tail(path, long), short) == read_tail(path, short)


def test_huge_sparse_transcript_reads_only_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "round-000001.log"
    with path.open("wb") as f:
        f.truncate(2 * 1024**3)  # 2 GiB of holes: costs no disk
        f.seek(0, 2)
        f.write(b"\n" + LIMIT.read_bytes())
    assert len(read_tail(path, TAIL_BYTES)) <= TAIL_BYTES
    assert parse_transcript("claude", path, now=NOW) == parse_transcript("claude", LIMIT, now=NOW)


def test_a_limit_pushed_out_of_the_tail_by_later_output_is_not_seen(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    path.write_bytes(LIMIT.read_bytes() + b"progress line\n" * (TAIL_BYTES // 14 + 1))
    assert parse_transcript("claude", path, now=NOW).transient is None


def test_report_findings_emits_each_kind_with_the_round() -> None:
    events = RecordedEvents()
    findings = Findings(
        transient=Transient("rate_limit_account", NOW + 60, "rate_limit_event five_hour rejected"),
        auth_error="result api_error_status 401",
        usage=Usage("m", 1, 2, 3, 4, 0.5),
    )
    report_findings(findings, round_no=42, emit=events)
    assert events.events == [
        {
            "event": "transient_error_detected",
            "round": 42,
            "classification": "rate_limit_account",
            "reset_at": NOW + 60,
            "detail": "rate_limit_event five_hour rejected",
        },
        {
            "event": "agent_auth_error_detected",
            "round": 42,
            "reason": "result api_error_status 401",
        },
        {
            "event": "agent_usage_recorded",
            "round": 42,
            "model": "m",
            "input_tokens": 1,
            "output_tokens": 2,
            "cache_read_tokens": 3,
            "cache_creation_tokens": 4,
            "cost_usd": 0.5,
        },
    ]


def test_report_findings_emits_nothing_for_an_empty_finding() -> None:
    events = RecordedEvents()
    report_findings(Findings(), round_no=1, emit=events)
    assert events.events == []


def test_exact_reset_beats_a_later_estimate_and_later_reset_beats_earlier() -> None:
    early = Transient("rate_limit_account", NOW + 10, "a")
    late = Transient("rate_limit_account", NOW + 99, "b")
    vague = Transient("rate_limit_model", None, "c")
    assert pick_transient([early, vague]) == early
    assert pick_transient([late, early, vague]) == late
    assert pick_transient([vague, None]) == vague
    assert pick_transient([]) is None


def test_redaction_masks_keys_and_tokens_and_keeps_one_short_line() -> None:
    text = (
        "key sk-ant-api03-SECRETSECRET\nAuthorization: Bearer abc.def api_key=hunter2 " + "x" * 500
    )
    line = short_redacted(text)
    assert "SECRETSECRET" not in line
    assert "abc.def" not in line
    assert "hunter2" not in line
    assert "\n" not in line
    assert len(line) <= MAX_DETAIL_CHARS


def check(findings: Findings) -> None:
    if findings.transient is not None:
        assert findings.transient.classification in TRANSIENT_CLASSES
        reset = findings.transient.reset_at
        assert reset is None or math.isfinite(reset)
        assert "\n" not in findings.transient.detail
        assert len(findings.transient.detail) <= MAX_DETAIL_CHARS
        findings.transient.detail.encode("utf-8")
    if findings.auth_error is not None:
        assert "\n" not in findings.auth_error
        findings.auth_error.encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=4096), parser=st.sampled_from(sorted(PARSER_NAMES - {"none"})))
def test_any_bytes_parse_without_raising(
    data: bytes, parser: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("t") / "t.log"
    path.write_bytes(data)
    check(parse_transcript(parser, path, now=NOW, patterns=PATTERNS))


FRAGMENTS = st.sampled_from(
    [
        '{"type":"result","is_error":true,"api_error_status":',
        '{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":',
        '{"type":"turn.failed","error":{"message":"',
        '{"error":{"code":429,"message":"',
        "1e999", "NaN", "Infinity", "-1", "99999999999999999999", "true", "null",
        '"', "}", "]", "{", "\n",
        "You've hit your usage limit · resets ", "try again in ", "reset after ", "9999999 days",
        "3:28 PM", "Feb 30, 2027 25:61", "13/45/2027", "(Not/AZone)",
        "Tokens: 1.2k sent, 9 received.", "Cost: $0.01 message, $99999999999999999999 session.",
        "\ud800", "\x00", "sk-abcdefghij",
        '{"type":"error","error":{"name":"APIError","data":{"statusCode":', '"retry-after":"',
        '{"type":"step_finish","part":{"tokens":{"input":', '{"type":"session.error","data":{',
        '{"type":"model.call_failure","data":{"statusCode":', "[API Error: ",
        "Retrying in 60s (attempt 1/10): ", 'level=ERROR message="stream error" error.error="',
        "rate limit in ", "quota resets ", " in ", " out $", "1,234", "Mon, 32 Foo 2026",
    ]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(FRAGMENTS, max_size=40), parser=st.sampled_from(sorted(PARSER_NAMES)))
def test_hostile_fragments_parse_without_raising(parts: list[str], parser: str) -> None:
    tail = "".join(parts).encode("utf-8", "surrogatepass")
    check(parse_tail(parser, tail, now=NOW, patterns=PATTERNS))


def test_a_long_line_of_unclosed_braces_stays_cheap() -> None:
    from agent_runner.parsers import claude

    tail = ('{"a":' * 20000 + "\n").encode() * 10
    assert claude.parse(tail, now=NOW) == Findings()


@pytest.mark.parametrize("name", preset_names())
def test_presets_are_data_with_exactly_the_agent_keys(name: str) -> None:
    text = (resources.files("agent_runner") / "presets" / f"{name}.toml").read_text("utf-8")
    preset = tomllib.loads(text)
    # The demo agent writes nothing of its own: only the real CLIs name state folders; the
    # generic preset names no CLI at all (the operator's command, the operator's folders).
    writable = {"writable"} if name not in ("demo", "generic") else set()
    command = {"command"} if name != "generic" else set()
    assert set(preset) == {"prompt_delivery", "parser", "env", *command, *writable}
    for entry in preset.get("writable", []):
        # In the agent's HOME or a folder its variable names, never the HOME itself.
        assert entry.startswith(("~/", "$")) and entry not in ("~/", "~/."), entry
    assert preset.get("command", ["generic"])
    assert all(isinstance(a, str) for a in preset.get("command", []))
    assert preset["prompt_delivery"] in {"stdin", "argv"}
    assert preset["parser"] in PARSER_NAMES
    assert all(isinstance(v, str) for v in preset["env"].values())


def load_preset(name: str) -> Any:
    path = resources.files("agent_runner") / "presets" / f"{name}.toml"
    return tomllib.loads(path.read_text("utf-8"))


def test_presets_ask_each_cli_for_the_output_its_parser_reads() -> None:
    claude, codex, gemini, aider, demo = map(
        load_preset, ["claude", "codex", "gemini", "aider", "demo"]
    )
    assert claude["command"] == ["claude", "-p", "--output-format", "stream-json", "--verbose"]
    assert claude["env"] == {"DISABLE_AUTOUPDATER": "1"}
    assert {"exec", "--json"} <= set(codex["command"])
    assert codex["command"][:2] == ["codex", "exec"]
    assert gemini["command"][1:3] == ["--output-format", "json"]
    assert aider["command"][-1] == "--message"
    assert aider["prompt_delivery"] == "argv"
    assert {"--yes-always", "--no-stream"} <= set(aider["command"])
    assert demo["command"] == ["python3", "-m", "agent_runner.demo_agent"]
    opencode, qwen, copilot = map(load_preset, ["opencode", "qwen", "copilot"])
    # opencode's JSON events, plus its error log lines: the only trace of a silent retry wait.
    assert opencode["command"][:4] == ["opencode", "run", "--format", "json"]
    assert opencode["command"][4:] == ["--print-logs", "--log-level", "ERROR"]
    # stream-json prints qwen's retry notices as they happen; json only a final array.
    assert qwen["command"][1:3] == ["--output-format", "stream-json"]
    assert copilot["command"][1:3] == ["--output-format", "json"]
    for preset in (opencode, qwen, copilot):
        assert preset["prompt_delivery"] == "stdin"


@pytest.mark.timeout(10)
def test_a_fifo_at_the_transcript_path_is_not_read_and_does_not_block(tmp_path: Path) -> None:
    path = tmp_path / "round-000001.log"
    os.mkfifo(path)
    assert parse_transcript("claude", path, now=NOW) == Findings()


def test_a_symlink_at_the_transcript_path_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "round-000001.log"
    path.symlink_to(LIMIT)
    assert parse_transcript("claude", path, now=NOW) == Findings()


def test_codex_preset_uses_only_flags_codex_exec_accepts() -> None:
    command = load_preset("codex")["command"]
    assert command == [
        "codex", "exec", "--json", "--sandbox", "workspace-write", "--skip-git-repo-check", "-",
    ]  # fmt: skip
    # `codex exec` rejects -a/--ask-for-approval, ignores it before `exec`; --full-auto is deprecated.
    assert not {"-a", "--ask-for-approval", "--full-auto"} & set(command)
