"""What a transcript parser reports: a transient error, an auth or setup failure, usage.

Parsers build these; the loop reads them. Values are as the provider reported them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TRANSIENT_CLASSES = ("rate_limit_account", "rate_limit_model", "api_transient_5xx", "api_timeout")


@dataclass(frozen=True)
class Transient:
    """A provider-side error worth waiting out rather than counting as a crash."""

    classification: str
    reset_at: float | None
    detail: str


@dataclass(frozen=True)
class Usage:
    """Model and token counts for the round, and the cost exactly as reported."""

    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_creation_tokens: int | None
    cost_usd: float | None


@dataclass(frozen=True)
class Findings:
    """Everything one parser run found; each part is None when not seen."""

    transient: Transient | None = None
    auth_error: str | None = None
    setup_error: str | None = None  # the CLI could not start here: untrusted folder, no auth type
    usage: Usage | None = None


def pick_transient(candidates: Iterable[Transient | None]) -> Transient | None:
    """The transient the loop should obey: an exact reset beats none, the latest reset wins.

    Candidates come in transcript order; without any reset time the last one wins.
    """
    timed = [t for t in candidates if t is not None]
    exact = [t for t in timed if t.reset_at is not None]
    if exact:
        # Two rejected limits: the agent can run again only when both have lifted.
        return max(exact, key=lambda t: t.reset_at or 0.0)
    return timed[-1] if timed else None
