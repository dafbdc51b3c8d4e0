"""The retry waits the real CLIs announce, read from their recorded transcripts cut right after
each announcement (what the silence watchdog sees while the CLI waits)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent_runner.parsers import announced_wait

REAL = Path(__file__).parents[1] / "fixtures" / "transcripts" / "real"


def cut_after_each(log: Path, pattern: str) -> list[tuple[bytes, str]]:
    """The transcript up to and including each line matching `pattern`, with that line."""
    lines = log.read_bytes().splitlines(keepends=True)
    return [
        (b"".join(lines[: i + 1]), line.decode())
        for i, line in enumerate(lines)
        if re.search(pattern, line.decode("utf-8", "replace"))
    ]


def test_claude_api_retry_lines_announce_their_delay() -> None:
    cuts = cut_after_each(REAL / "claude-2.1.332" / "rate_limit_short.log", '"api_retry"')
    assert len(cuts) == 10
    for prefix, line in cuts:
        assert announced_wait("claude", prefix) == json.loads(line)["retry_delay_ms"] / 1000


def test_gemini_retrying_after_lines_announce_their_delay() -> None:
    cuts = cut_after_each(REAL / "gemini-0.61.0" / "rate_limit.log", r"Retrying after \d+ms")
    assert [announced_wait("gemini", prefix) for prefix, _ in cuts] == [
        90.943,
        92.255,
        91.46,
        95.247,
    ]


def test_aider_retrying_in_lines_announce_their_delay() -> None:
    cuts = cut_after_each(REAL / "aider-0.86.2" / "server_error.log", r"^Retrying in")
    assert cuts
    for prefix, line in cuts:
        assert announced_wait("aider", prefix) == float(line.split()[2])


def test_codex_reconnect_lines_announce_no_delay() -> None:
    cuts = cut_after_each(REAL / "codex-0.171.0" / "rate_limit.log", "Reconnecting")
    assert cuts
    assert all(announced_wait("codex", prefix) is None for prefix, _ in cuts)


@pytest.mark.parametrize(
    ("cli", "parser"),
    [("claude-2.1.332", "claude"), ("gemini-0.61.0", "gemini"), ("aider-0.86.2", "aider")],
)
def test_a_finished_transcript_announces_nothing(cli: str, parser: str) -> None:
    assert announced_wait(parser, (REAL / cli / "success.log").read_bytes()) is None


def test_only_the_last_line_counts() -> None:
    retry = b'{"type":"system","subtype":"api_retry","retry_delay_ms":5000}\n'
    assert announced_wait("claude", retry) == 5.0
    assert announced_wait("claude", retry + b'{"type":"assistant"}\n') is None
    assert announced_wait("claude", retry + b"\n\n  \n") == 5.0


def test_the_announcement_is_read_with_the_parser_named_in_config() -> None:
    gemini = b"Suggested retry after 90s.. Retrying after 90943ms...\n"
    assert announced_wait("gemini", gemini) == 90.943
    assert announced_wait("claude", gemini) is None
    assert announced_wait("none", gemini) is None


@pytest.mark.parametrize(
    "line",
    [
        b'{"type":"system","subtype":"api_retry","retry_delay_ms":-5}',
        b'{"type":"system","subtype":"api_retry","retry_delay_ms":"5000"}',
        b'{"type":"system","subtype":"api_retry","retry_delay_ms":1e30}',
        b'{"type":"system","subtype":"api_retry"}',
        b'{"type":"system","subtype":"init","retry_delay_ms":5000}',
        b'{"type":"system","subtype":"api_retry","retry_delay_ms":5000',
        b"\xff\xfe not text",
        b"[" * 100_000,
    ],
)
def test_a_damaged_or_absurd_announcement_is_no_announcement(line: bytes) -> None:
    assert announced_wait("claude", line + b"\n") is None
