"""The recorded cases: what the fake API answers, and how long the CLI may run on its own.

A case's budget is the round budget it runs under; a CLI still retrying then is killed there,
exactly as serve kills it, and the recording says so.
"""

from __future__ import annotations

from dataclasses import dataclass

RETRY_BUDGET_S = 300.0
QUICK_BUDGET_S = 120.0
SHORT_BUDGET_S = 45.0
# qwen waits out a 429's retry-after without printing a line for seven attempts (~9 minutes).
LONG_BUDGET_S = 900.0


@dataclass(frozen=True)
class Case:
    name: str
    api: str  # what the fake API answers: "success" or a fault name of the provider module
    budget_s: float
    about: str
    refused: bool = False  # the CLI's base URL points at a closed port
    without_flag: str | None = None  # a preset flag left out of the command
    skip_setup: str | None = None  # a setup step of the CLI left out (see clis.py)
    oauth: bool = False  # log in with a subscription token instead of an API key


COMMON = (
    Case("success", "success", QUICK_BUDGET_S, "the API answers one short reply"),
    Case(
        "rate_limit", "rate_limit", RETRY_BUDGET_S, "HTTP 429 with the provider's reset information"
    ),
    Case("auth", "auth", RETRY_BUDGET_S, "the key is refused (401; Gemini: 400 API_KEY_INVALID)"),
    Case("server_error", "server_error", RETRY_BUDGET_S, "HTTP 500"),
    Case(
        "overloaded", "overloaded", RETRY_BUDGET_S, "overloaded (Anthropic 529, OpenAI/Gemini 503)"
    ),
    Case("connection_refused", "success", RETRY_BUDGET_S, "nothing listens", refused=True),
    Case("quota", "quota", RETRY_BUDGET_S, "the account's quota or credit is exhausted"),
    Case("unknown_model", "unknown_model", RETRY_BUDGET_S, "HTTP 404: the model does not exist"),
)
# Outlasting a short budget: the round is killed while the CLI still retries on its own.
AT_BUDGET = Case(
    "server_error_at_budget",
    "server_error",
    SHORT_BUDGET_S,
    "HTTP 500 under a 45 s round budget: killed while the CLI still retries",
)
EXTRA: dict[str, tuple[Case, ...]] = {
    "aider": (AT_BUDGET,),
    "claude": (
        AT_BUDGET,
        Case(
            "rate_limit_short",
            "rate_limit_short",
            RETRY_BUDGET_S,
            "HTTP 429 with a 5 s retry-after (Claude Code retries these itself)",
        ),
        Case(
            "usage_limit",
            "usage_limit",
            RETRY_BUDGET_S,
            "subscription login (CLAUDE_CODE_OAUTH_TOKEN) out of its five-hour window",
            oauth=True,
        ),
    ),
    "codex": (
        Case(
            "usage_limit",
            "usage_limit",
            RETRY_BUDGET_S,
            "429 usage_limit_reached with resets_at (the ChatGPT-plan shape)",
        ),
    ),
    "gemini": (
        AT_BUDGET,
        Case(
            "untrusted_folder",
            "success",
            QUICK_BUDGET_S,
            "the preset's --skip-trust left out, in a fresh repository",
            without_flag="--skip-trust",
        ),
        Case(
            "no_auth_method",
            "success",
            QUICK_BUDGET_S,
            "no auth type in settings.json (with GOOGLE_GEMINI_BASE_URL gemini infers one it"
            " refuses)",
            skip_setup="auth_type",
        ),
    ),
    "opencode": (AT_BUDGET,),
    "qwen": (
        Case(
            "rate_limit",
            "rate_limit",
            LONG_BUDGET_S,
            "HTTP 429 with the provider's reset information, under a 900 s budget: qwen waits"
            " out retry-after silently for seven attempts before it prints anything",
        ),
        AT_BUDGET,
        Case(
            "no_auth_method",
            "success",
            QUICK_BUDGET_S,
            "no auth type in settings.json and no OPENAI_API_KEY to infer one from",
            skip_setup="auth_type",
        ),
    ),
    "copilot": (
        Case(
            "not_logged_in",
            "success",
            QUICK_BUDGET_S,
            "neither a provider of one's own (COPILOT_PROVIDER_BASE_URL) nor a GitHub login",
            skip_setup="provider",
        ),
    ),
}


def cases_for(cli: str) -> tuple[Case, ...]:
    """Every case recorded for `cli`, in order (a CLI's own case replaces the common one)."""
    own = {case.name: case for case in EXTRA.get(cli, ())}
    common = tuple(own.pop(case.name, case) for case in COMMON)
    return common + tuple(own.values())


def find_case(cli: str, name: str) -> Case:
    for case in cases_for(cli):
        if case.name == name:
            return case
    raise SystemExit(f"{cli} has no case {name!r}: {[c.name for c in cases_for(cli)]}")
