"""Every recorded transcript of the real CLIs, read by its parser: the finding the case means.

Recordings come from `make record` (tests/fixtures/transcripts/real); what each one must yield
is in tests/real_transcripts.py.
"""

from __future__ import annotations

import pytest

from agent_runner.parsers import parse_transcript
from tests.real_transcripts import CLIS, EXPECTED, Recording, check_findings, recordings

RECORDINGS = recordings()
# Resets stated relative to the read are checked against this clock.
NOW = 1_800_000_000.0


def test_the_corpus_covers_every_cli_and_each_recording_has_an_expectation() -> None:
    assert {r.cli for r in RECORDINGS} == set(CLIS)
    # The contract of a real preset: at least six recorded cases of the CLI it runs.
    for cli in CLIS:
        assert sum(1 for r in RECORDINGS if r.cli == cli) >= 6, cli
    assert sorted(r.id for r in RECORDINGS if (r.cli, r.case) not in EXPECTED) == []


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
