"""aider, plain text: litellm errors after the last reply, and the "Tokens: … Cost: …" lines.

aider prints a Tokens line after every successful reply, so only what follows the last
one can explain why the round stopped; "Retrying in N seconds" is aider's own pacing.
"""

from __future__ import annotations

import re

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Usage

_NUMBER = r"\d{1,15}(?:\.\d{1,6})?"
_TOKENS = re.compile(
    rf"^Tokens: (?P<sent>{_NUMBER}[kKmM]?) sent"
    rf"(?:, (?P<write>{_NUMBER}[kKmM]?) cache write)?"
    rf"(?:, (?P<hit>{_NUMBER}[kKmM]?) cache (?:hit|read))?"
    rf"(?:, (?P<received>{_NUMBER}[kKmM]?) received)?"
)
_COST = re.compile(rf"Cost: \$(?P<message>{_NUMBER}) message, \$(?P<session>{_NUMBER}) session")
_MODEL = re.compile(r"^(?:Main )?[Mm]odel: (?P<model>\S+)")
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}


def parse(tail: bytes, *, now: float) -> Findings:
    """Findings in the tail of an aider `--message` transcript."""
    lines = [line for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
    reports = [(i, m) for i, line in enumerate(lines) if (m := _TOKENS.match(line.strip()))]
    after = lines[reports[-1][0] + 1 :] if reports else lines
    found = text.scan_lines(after[-text.WINDOW_LINES :], now=now)
    model = next((m.group("model") for line in lines if (m := _MODEL.match(line.strip()))), None)
    usage = _usage([m for _, m in reports], [lines[i] for i, _ in reports], model)
    return Findings(transient=found.transient, auth_error=found.auth_error, usage=usage)


def _usage(
    reports: list[re.Match[str]], report_lines: list[str], model: str | None
) -> Usage | None:
    if not reports:
        return None
    cost = _COST.search(report_lines[-1])
    return Usage(
        model=model,
        # One Tokens line per reply of the round; each counts that reply only.
        input_tokens=_total(reports, "sent"),
        output_tokens=_total(reports, "received"),
        cache_read_tokens=_total(reports, "hit"),
        cache_creation_tokens=_total(reports, "write"),
        # The session figure is the whole aider run, which is the whole round.
        cost_usd=float(cost.group("session")) if cost else None,
    )


def _total(reports: list[re.Match[str]], field: str) -> int | None:
    counts = [_count(m.group(field)) for m in reports if m.group(field)]
    return sum(counts) if counts else None


def _count(shown: str) -> int:
    """aider's format_tokens ("345", "1.2k", "12k") back to a number."""
    scale = _SCALE.get(shown[-1].lower(), 1) if shown[-1].isalpha() else 1
    return round(float(shown.rstrip("kKmM")) * scale)
