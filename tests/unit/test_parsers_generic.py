"""The `generic` parser and `[agent.patterns]`: checked at load, matched on the last lines only."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from agent_runner.config import load_config
from agent_runner.errors import ConfigError, ExitCode
from agent_runner.parsers import Findings, Usage, parse_tail
from agent_runner.parsers.text import WINDOW_LINES
from agent_runner.patterns import MATCHED_CHARS, Patterns, compile_patterns

NOW = 1_800_000_000.0
DOCS = Path(__file__).parents[2] / "docs" / "agents.md"


def worked_example() -> tuple[dict[str, str], str]:
    """The `[agent.patterns]` table and the transcript of the worked example in agents.md."""
    text = DOCS.read_text("utf-8")
    section = text[text.index("### `generic`") :]
    toml = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    transcript = re.search(r"```text\n(.*?)```", section, re.DOTALL)
    assert toml is not None and transcript is not None
    return tomllib.loads(toml[1])["agent"]["patterns"], transcript[1]


def parse(patterns: Patterns, text: str, *, clean: bool = False) -> Findings:
    cause = "clean" if clean else "error"
    return parse_tail("generic", text.encode(), now=NOW, exit_cause=cause, patterns=patterns)


def test_the_worked_example_in_the_docs_reads_as_it_says() -> None:
    raw, transcript = worked_example()
    patterns = compile_patterns(raw)
    lines = transcript.splitlines()
    # The limit line alone: a rate limit with the stated reset, 42 s from the read.
    limit = next(line for line in lines if "rate limited" in line)
    found = parse(patterns, limit)
    assert found.transient is not None
    assert (found.transient.classification, found.transient.reset_at) == (
        "rate_limit_model",
        NOW + 42,
    )
    # The whole transcript: the usage line after it is read too.
    found = parse(patterns, transcript)
    assert found.transient is not None and found.transient.reset_at == NOW + 42
    assert found.usage == Usage("acme-large", 1204, 311, None, None, 0.0123)
    assert found.auth_error is None and found.setup_error is None
    # The other messages the example names.
    auth = "[acme] error: invalid API key (check ACME_API_KEY)"
    assert parse(patterns, auth).auth_error == auth
    assert parse(patterns, "[acme] error: unknown model acme-huge").setup_error is not None
    outage = parse(patterns, "[acme] error: 503 upstream unavailable").transient
    assert outage is not None and outage.classification == "api_transient_5xx"
    quota = "[acme] error: monthly quota exhausted, resets 2027-01-15T10:00:00Z"
    found = parse(patterns, quota)
    assert found.transient is not None
    assert found.transient.classification == "rate_limit_account"
    assert found.transient.reset_at == 1_800_007_200.0  # the ISO time, exactly


def test_after_a_clean_exit_only_usage_counts() -> None:
    raw, transcript = worked_example()
    found = parse(compile_patterns(raw), transcript, clean=True)
    assert (found.transient, found.auth_error, found.setup_error) == (None, None, None)
    assert found.usage is not None


@pytest.mark.parametrize(
    ("reset", "expected"),
    [
        ("90", NOW + 90),
        ("2.5", NOW + 2.5),
        ("1m30s", NOW + 90),
        ("2 hours", NOW + 7200),
        ("1800003600", 1_800_003_600.0),
        ("2027-01-15T10:00:00Z", 1_800_007_200.0),
        ("soon", None),
        ("9" * 400, None),
    ],
)
def test_the_reset_capture_is_an_epoch_seconds_a_duration_or_a_time(
    reset: str, expected: float | None
) -> None:
    patterns = compile_patterns({"rate_limit": r"^limited until (?P<reset>.+)$"})
    found = parse(patterns, f"limited until {reset}\n")
    assert found.transient is not None
    assert found.transient.reset_at == expected


def test_only_the_last_lines_are_read_and_each_only_up_to_the_cap() -> None:
    patterns = compile_patterns({"outage": r"SERVICE DOWN$"})
    assert parse(patterns, "SERVICE DOWN\n").transient is not None
    # Pushed out of the window by later lines: not seen.
    pushed = "SERVICE DOWN\n" + "working\n" * WINDOW_LINES
    assert parse(patterns, pushed).transient is None
    # Past the cap on its line: the pattern never sees it.
    long = "x" * MATCHED_CHARS + " SERVICE DOWN\n"
    assert parse(patterns, long).transient is None
    assert parse(patterns, long[MATCHED_CHARS - 20 :]).transient is not None


def test_usage_counts_with_thousands_separators_and_the_last_match_wins() -> None:
    patterns = compile_patterns(
        {"usage": r"^tokens (?P<input_tokens>[\d,]+)/(?P<output_tokens>[\d_]+)"}
    )
    found = parse(patterns, "tokens 1/2\ntokens 1,204/3_000\n")
    assert found.usage == Usage(None, 1204, 3000, None, None, None)
    assert parse(patterns, "tokens 99999999999999999999/1\n").usage == Usage(
        None, None, 1, None, None, None
    )


def config_error(tmp_path: Path, agent: str) -> str:
    (tmp_path / "prompts").mkdir(exist_ok=True)
    (tmp_path / "prompts" / "main.md").write_text("work\n")
    path = tmp_path / "agent-runner.toml"
    path.write_text(f"schema_version = 1\n[agent]\n{agent}", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.exit_code == ExitCode.CONFIG
    message = str(caught.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}: ")


GENERIC = 'preset = "generic"\ncommand = ["my-agent"]\n[agent.patterns]\n'


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        ("auth = '('", "agent.patterns.auth: not a regular expression: missing ), unterminated"),
        ("auth = 'x|'", "agent.patterns.auth: matches the empty string, so it would match every"),
        ("outage = '(?:5\\d\\d)?'", "agent.patterns.outage: matches the empty string"),
        ("auth = ''", "agent.patterns.auth: must not be empty"),
        ("rate_limit = '(a+)+$'", "agent.patterns.rate_limit: repeats a repetition or an alt"),
        ("setup = '(?:x|yz)*!'", "agent.patterns.setup: repeats a repetition or an alternation"),
        ("rate_limit = '(?P<when>\\d+)s'", "names a group 'when' it does not read (groups: reset)"),
        ("auth = '(?P<reset>x)'", "agent.patterns.auth: names a group 'reset' it does not read"),
        ("usage = 'tokens \\d+'", "agent.patterns.usage: names none of the groups model, input"),
        ("ratelimit = 'x'", "agent.patterns.ratelimit: unknown pattern; known: rate_limit, quota"),
        ('"a\\nb" = "x"', 'agent.patterns."a\\nb": unknown pattern'),
        ("auth = 'a{99999999999}'", "not a regular expression: the repetition number is too lar"),
        (f"auth = '{'x' * 1001}'", "agent.patterns.auth: longer than 1000 characters"),
        ("auth = 1", "agent.patterns.auth: must be a string, got an integer"),
    ],
)
def test_a_bad_pattern_is_a_one_line_config_error(
    tmp_path: Path, patterns: str, expected: str
) -> None:
    assert expected in config_error(tmp_path, GENERIC + patterns + "\n")


def test_patterns_belong_to_the_generic_parser_and_it_needs_one(tmp_path: Path) -> None:
    claude = 'preset = "claude"\n[agent.patterns]\nauth = "401"\n'
    assert config_error(tmp_path, claude) == (
        "agent.patterns: read only by parser 'generic', not 'claude'"
    )
    assert config_error(tmp_path, GENERIC) == (
        "agent.patterns: the 'generic' parser reads nothing else: set at least one of"
        " rate_limit, quota, outage, auth, setup, usage"
    )


def test_possessive_and_atomic_repetitions_and_optional_groups_are_accepted() -> None:
    patterns = compile_patterns(
        {
            "rate_limit": r"(?:a++)+ limit (?P<reset>\d+(?:\.\d+)?\s*(?:ms|s)?)",
            "outage": r"(?>x+)+ down",
            "auth": r"^(?:error|fatal): (?:invalid|expired) (?:key|token)\b",
        }
    )
    assert set(patterns.compiled) == {"rate_limit", "outage", "auth"}
