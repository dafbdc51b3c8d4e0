"""The recorded conformance corpus (tests/fixtures/transcripts/real) and what each must yield.

Every recording made by `make record` needs an entry in EXPECTED: what the case *is* (an auth
failure, a rate limit, an outage, a setup error, a success), decided from the case and the
CLI's output, never from what the parser happens to report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from agent_runner.parsers import Findings

REAL = Path(__file__).parent / "fixtures" / "transcripts" / "real"
# Every preset of a real CLI: each is recorded (scripts/recording/clis.py).
CLIS = ("claude", "codex", "gemini", "aider", "opencode", "qwen", "copilot")
OUTAGE = ("api_transient_5xx", "api_timeout")
# A recording's exact reset lands this far after the recording started (the CLI's own delay).
EXACT_SLACK_S = 30.0


@dataclass(frozen=True)
class Recording:
    folder: Path
    case: str
    meta: dict[str, Any]

    @property
    def cli(self) -> str:
        return str(self.meta["cli"])

    @property
    def log(self) -> Path:
        return self.folder / f"{self.case}.log"

    @property
    def id(self) -> str:
        return f"{self.folder.name}/{self.case}"


@dataclass(frozen=True)
class Expect:
    """What a recording means to the loop.

    `reset`: how the CLI stated the reset, if it did. "exact": an epoch, `reset_in_s` after the
    recording started; "relative": `reset_in_s` after the transcript is read; "clock": a clock
    time to the minute (taken as the end of that minute, within the next day).
    """

    kind: Literal["success", "auth", "setup", "limit", "outage", "silent"]
    classification: str | None = None
    reset: Literal["exact", "relative", "clock"] | None = None
    reset_in_s: float | None = None


SUCCESS = Expect("success")
AUTH = Expect("auth")
SETUP = Expect("setup")
DOWN = Expect("outage")
# Killed while the CLI retried without printing a line: nothing to read, by the CLI's doing.
SILENT = Expect("silent")


def limit(classification: str, reset: Any = None, reset_in_s: float | None = None) -> Expect:
    return Expect("limit", classification, reset, reset_in_s)


# The fake APIs' reset information (scripts/recording/fakeapi).
PER_MINUTE_RESET_S = 90
USAGE_RESET_S = 2 * 3600 + 17 * 60

EXPECTED: dict[tuple[str, str], Expect] = {
    ("claude", "success"): SUCCESS,
    ("claude", "auth"): AUTH,
    # retry-after 90 s: Claude Code gives up at once and prints no reset.
    ("claude", "rate_limit"): limit("rate_limit_model"),
    ("claude", "server_error"): DOWN,
    ("claude", "overloaded"): DOWN,
    ("claude", "connection_refused"): DOWN,
    # Killed while retrying: only api_retry lines, no result.
    ("claude", "server_error_at_budget"): DOWN,
    # retry-after 5 s: Claude Code retries ten times (about 3 minutes), then prints the 429.
    ("claude", "rate_limit_short"): limit("rate_limit_model"),
    # "Credit balance is too low": waits on the ladder until someone tops it up.
    ("claude", "quota"): limit("rate_limit_account"),
    # rate_limit_event resetsAt, from the anthropic-ratelimit-unified-reset header.
    ("claude", "usage_limit"): limit("rate_limit_account", "exact", USAGE_RESET_S),
    # 404 not_found_error: "There's an issue with the selected model".
    ("claude", "unknown_model"): SETUP,
    ("codex", "success"): SUCCESS,
    ("codex", "auth"): AUTH,
    ("codex", "server_error"): DOWN,
    ("codex", "overloaded"): DOWN,
    # insufficient_quota: codex retries it and prints only "exceeded retry limit, last status 429".
    ("codex", "quota"): limit("rate_limit_model"),
    # "try again at 11:23 AM."
    ("codex", "usage_limit"): limit("rate_limit_account", "clock"),
    # retry-after 90 s honoured: still retrying ("Reconnecting... 4/5 (… 429 …)") at the budget.
    ("codex", "rate_limit"): limit("rate_limit_model"),
    # "Reconnecting... waiting for network" until the budget.
    ("codex", "connection_refused"): DOWN,
    ("codex", "unknown_model"): SETUP,
    ("gemini", "success"): SUCCESS,
    ("gemini", "auth"): AUTH,
    # Still retrying at the budget: "Attempt 4 failed: You exceeded your current quota …
    # Suggested retry after 90s.."
    ("gemini", "rate_limit"): limit("rate_limit_account", "relative", PER_MINUTE_RESET_S),
    ("gemini", "server_error"): DOWN,
    ("gemini", "overloaded"): DOWN,
    # "exception TypeError: fetch failed sending request", code 1.
    ("gemini", "connection_refused"): DOWN,
    # TerminalQuotaError "exhausted your daily quota on this model"; its report says
    # "Please retry in 8220.5s."
    ("gemini", "quota"): limit("rate_limit_model", "relative", 8220.5),
    ("gemini", "server_error_at_budget"): DOWN,
    ("gemini", "unknown_model"): SETUP,
    ("gemini", "untrusted_folder"): SETUP,
    ("gemini", "no_auth_method"): SETUP,
    ("aider", "success"): SUCCESS,
    ("aider", "auth"): AUTH,
    # "Please try again in 1m30s", wrapped onto the next line by aider.
    ("aider", "rate_limit"): limit("rate_limit_model", "relative", PER_MINUTE_RESET_S),
    ("aider", "server_error"): DOWN,
    ("aider", "overloaded"): DOWN,
    ("aider", "connection_refused"): DOWN,
    ("aider", "quota"): limit("rate_limit_account"),
    ("aider", "server_error_at_budget"): DOWN,
    # litellm.NotFoundError: "The model `gpt-5-codex` does not exist", wrapped.
    ("aider", "unknown_model"): SETUP,
    ("qwen", "success"): SUCCESS,
    ("qwen", "auth"): AUTH,
    # Under 900 s: after seven silent attempts (93 s apart) qwen prints "Retrying in 90s (attempt
    # 1/10): [API Error: 429 … Please try again in 1m30s …]".
    ("qwen", "rate_limit"): limit("rate_limit_model", "relative", PER_MINUTE_RESET_S),
    ("qwen", "server_error"): DOWN,
    # Still retrying at the budget: "Retrying in 120s (attempt 2/10): [API Error: 503 …]".
    ("qwen", "overloaded"): DOWN,
    # "[API Error: Connection error. (cause: connect ECONNREFUSED …)]".
    ("qwen", "connection_refused"): DOWN,
    # insufficient_quota: retried like a rate limit ("Retrying in 120s (attempt 2/10): [API
    # Error: 429 You exceeded your current quota …]"), still at the budget; no reset.
    ("qwen", "quota"): limit("rate_limit_account"),
    ("qwen", "unknown_model"): SETUP,
    # 45 s into its silent retries of the 500 (the first line comes after ~100 s).
    ("qwen", "server_error_at_budget"): SILENT,
    # "No auth type is selected. Please configure an auth type …".
    ("qwen", "no_auth_method"): SETUP,
    ("opencode", "success"): SUCCESS,
    ("opencode", "auth"): AUTH,
    # Still waiting out retry-after at the budget, silent on stdout: the last "stream error"
    # log line on stderr says "Please try again in 1m30s".
    ("opencode", "rate_limit"): limit("rate_limit_model", "relative", PER_MINUTE_RESET_S),
    ("opencode", "server_error"): DOWN,
    ("opencode", "overloaded"): DOWN,
    # After its own retries: an error event "Cannot connect to API: …", no status.
    ("opencode", "connection_refused"): DOWN,
    # insufficient_quota, 429: "You exceeded your current quota", no reset.
    ("opencode", "quota"): limit("rate_limit_account"),
    ("opencode", "unknown_model"): SETUP,
    # Killed while retrying: the last "stream error" line holds OpenAI's 500 wording only.
    ("opencode", "server_error_at_budget"): DOWN,
    ("copilot", "success"): SUCCESS,
    # session.error "authentication": "Authentication failed with provider … (HTTP 401)".
    ("copilot", "auth"): AUTH,
    # Killed while retrying: the last model.call_failure holds the body, "try again in 1m30s".
    ("copilot", "rate_limit"): limit("rate_limit_model", "relative", PER_MINUTE_RESET_S),
    ("copilot", "server_error"): DOWN,
    ("copilot", "overloaded"): DOWN,
    # "Could not connect to local model provider at …".
    ("copilot", "connection_refused"): DOWN,
    # insufficient_quota: "You exceeded your current quota", without a reset.
    ("copilot", "quota"): limit("rate_limit_account"),
    # "Model 'gpt-4o' not found on provider at … (HTTP 404)".
    ("copilot", "unknown_model"): SETUP,
    # "Error: No authentication information found.": a GitHub login (or BYOK) is missing.
    ("copilot", "not_logged_in"): AUTH,
}


def recordings() -> list[Recording]:
    """Every recorded case, in a stable order."""
    found = []
    for meta_path in sorted(REAL.glob("*/*.json")):
        if meta_path.name == "cli.json":
            continue
        meta = json.loads(meta_path.read_text())
        found.append(Recording(meta_path.parent, meta_path.stem, meta))
    return found


def check_findings(found: Findings, expect: Expect, recording: Recording, now: float) -> None:
    """The assertions the findings of `recording`, read at `now`, must pass."""
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
    if expect.kind == "silent":
        assert (found.transient, found.auth_error, found.setup_error) == (None, None, None)
        assert recording.meta["killed_at_budget"]
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
