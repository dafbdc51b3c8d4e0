"""Every recorded transcript of the real CLIs, read by its parser: the finding the case means.

Recordings come from `make record` (tests/fixtures/transcripts/real); what each one must yield
is in tests/real_transcripts.py.
"""

from __future__ import annotations

import pytest

from agent_runner.parsers import Findings, parse_transcript
from tests.real_transcripts import EXPECTED, OUTAGE, Expect, Recording, recordings

RECORDINGS = recordings()
# Resets stated relative to the read are checked against this clock.
NOW = 1_800_000_000.0
# A recording's exact reset lands this far after the recording started (the CLI's own delay).
EXACT_SLACK_S = 30.0


def test_the_corpus_covers_every_cli_and_each_recording_has_an_expectation() -> None:
    assert {r.cli for r in RECORDINGS} == {"claude", "codex", "gemini", "aider"}
    assert sorted(r.id for r in RECORDINGS if (r.cli, r.case) not in EXPECTED) == []


def check_findings(found: Findings, expect: Expect, recording: Recording, now: float) -> None:
    """The assertions a finding must pass for `expect` (shared with the serve replay)."""
    if expect.kind == "success":
        assert (found.transient, found.auth_error, found.setup_error) == (None, None, None)
        return
    if expect.kind == "auth":
        assert found.auth_error is not None
        assert (found.transient, found.setup_error) == (None, None)
        return
    if expect.kind == "setup":
        assert found.setup_error is not None
        assert (found.transient, found.auth_error) == (None, None)
        return
    assert found.auth_error is None and found.setup_error is None
    assert found.transient is not None
    if expect.kind == "outage":
        assert found.transient.classification in OUTAGE
        return
    assert found.transient.classification == expect.classification
    reset_at = found.transient.reset_at
    if expect.reset is None:
        assert reset_at is None
    elif expect.reset == "exact":
        assert expect.reset_in_s is not None and reset_at is not None
        start = recording.meta["recorded_at"] + expect.reset_in_s
        assert start <= reset_at <= start + EXACT_SLACK_S
    elif expect.reset == "relative":
        assert expect.reset_in_s is not None
        assert reset_at == pytest.approx(now + expect.reset_in_s, abs=1.0)
    else:
        # To the minute: the end of that minute, never earlier than the time printed.
        assert reset_at is not None and reset_at % 60 == 0
        assert now < reset_at <= now + 86400 + 60


@pytest.mark.usefixtures("utc_local_time")
@pytest.mark.parametrize("recording", RECORDINGS, ids=[r.id for r in RECORDINGS])
def test_recorded_transcript_yields_what_the_case_means(recording: Recording) -> None:
    expect = EXPECTED[(recording.cli, recording.case)]
    found = parse_transcript(
        recording.cli, recording.log, now=NOW, exit_cause=recording.meta["exit_cause"]
    )
    check_findings(found, expect, recording, NOW)
    if expect.kind == "success":
        assert found.usage is not None
