"""One table of secret shapes: each is masked in events and in reasons taken from transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_runner.events import EventLog
from agent_runner.parsers.claude import parse
from agent_runner.redaction import REDACTED, SECRET_PATTERNS, redact
from tests.fakes import FakeClock

NOV_30 = 1_796_064_000.0  # 2026-11-30T00:00:00Z

# (text containing a secret, the secret part that must go, what stays to say what was there)
SHAPES = [
    pytest.param(
        "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36P",
        "SflKxwRJSMeKKF2QT4fwpMeJf36P",
        REDACTED,
        id="jwt",
    ),
    pytest.param(
        "Authorization: Bearer abc.def-ghi", "abc.def-ghi", "Bearer [REDACTED]", id="bearer"
    ),
    pytest.param("key sk-ant-api03-SECRETSECRET", "SECRETSECRET", "sk-[REDACTED]", id="sk"),
    pytest.param("aws AKIAIOSFODNN7EXAMPLE used", "IOSFODNN7EXAMPLE", "AKIA[REDACTED]", id="akia"),
    pytest.param(
        "key AIzaSyA1234567890abcdefghijklmnop", "SyA1234567890abcdef", "AIza[REDACTED]", id="aiza"
    ),
    pytest.param(
        "gh ghp_abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123", "ghp_", id="ghp"
    ),
    pytest.param(
        "pat github_pat_11ABCDEFG0123456789_abcdefghij",
        "11ABCDEFG0123456789_abcdefghij",
        "github_pat_[REDACTED]",
        id="github_pat",
    ),
    pytest.param("slack xoxb-1234567890-abcdefghij", "1234567890-abcdefghij", "xoxb-", id="slack"),
    pytest.param(
        "url?api_key=hunter2secret&x=1", "hunter2secret", "api_key=[REDACTED]", id="api_key"
    ),
    pytest.param('{"password": "hunter2"}', "hunter2", '"password": "[REDACTED]', id="password"),
    pytest.param("x-api-key: k3yk3yk3y", "k3yk3yk3y", "x-api-key: [REDACTED]", id="x-api-key"),
    pytest.param(
        "client_secret=s3cr3tvalue", "s3cr3tvalue", "client_secret=[REDACTED]", id="client_secret"
    ),
]


def test_every_pattern_in_the_table_has_a_shape_tested_here() -> None:
    matched = {
        pattern.pattern
        for pattern, _ in SECRET_PATTERNS
        for shape in SHAPES
        if pattern.search(str(shape.values[0]))
    }
    assert matched == {pattern.pattern for pattern, _ in SECRET_PATTERNS}


@pytest.mark.parametrize(("text", "secret", "shown"), SHAPES)
def test_the_table_masks_each_shape_and_keeps_its_label(text: str, secret: str, shown: str) -> None:
    masked = redact(text)
    assert secret not in masked
    assert shown in masked


@pytest.mark.parametrize(("text", "secret", "shown"), SHAPES)
def test_each_shape_is_masked_in_the_event_log(
    tmp_path: Path, text: str, secret: str, shown: str
) -> None:
    log = EventLog(tmp_path / "logs", clock=FakeClock(wall=NOV_30))
    log.emit("crash_loop", count=5, reason=text)
    log.emit("dirty_detected", round=1, files=[f"notes/{text}.txt"], count=1)
    written = (tmp_path / "logs" / "events-2026-11.jsonl").read_text()
    assert secret not in written
    lines = [json.loads(line) for line in written.splitlines()]
    assert shown in lines[0]["reason"]
    assert shown in lines[1]["files"][0]


@pytest.mark.parametrize(("text", "secret", "shown"), SHAPES)
def test_each_shape_is_masked_in_a_reason_taken_from_a_transcript(
    text: str, secret: str, shown: str
) -> None:
    line = {"type": "result", "is_error": True, "api_error_status": 401, "result": text}
    found = parse(json.dumps(line).encode() + b"\n", now=NOV_30)
    assert found.auth_error is not None
    assert secret not in found.auth_error
    assert shown in found.auth_error


def test_ordinary_words_are_left_alone() -> None:
    text = "ghost skeleton AKIAshort password reset docs for the api key flow"
    assert redact(text) == text
