"""aider, plain text: its own error lines after the last reply, and the "Tokens: … Cost: …" lines.

aider prints a Tokens line after every reply, then "Applied edit to …" and "Commit <sha> <message>"
(text the model wrote), so only aider's error shapes after the last Tokens line count: litellm
exception lines, aider's explanations of them, and what it printed before "Retrying in N seconds".
aider wraps a litellm message at 80 columns; its continuation lines are read as one message.
"""

from __future__ import annotations

import re
from dataclasses import replace

from agent_runner.parsers import text
from agent_runner.parsers.findings import Findings, Usage
from agent_runner.parsers.signals import MAX_MESSAGE_CHARS

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
# str() of a litellm exception, and the explanations aider prints for them (aider/exceptions.py).
_LITELLM = re.compile(r"^litellm\.\w+:")
_ERROR_LINE = re.compile(
    r"^(?:litellm\.\w+:|The API provider(?: has rate limited you| is not able to authenticate you"
    r"| timed out without returning|'s servers are down or overloaded))"
)
_RETRYING = re.compile(r"^Retrying in \d+(?:\.\d+)? seconds")
# aider's reports of its own actions; the commit message on a Commit line is the model's text.
_ACTION = re.compile(r"^(?:Applied edit to |Did not apply edit to |Commit [0-9a-f]{7,40} )")
_RETRY_CONTEXT_LINES = 2


def parse(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    """Findings in the tail of an aider `--message` transcript.

    aider exits 0 even after giving up on the API, so its own error lines count whatever the
    exit; `prose` off drops only the weaker evidence, unshaped lines before "Retrying in".
    """
    lines = _unwrapped(tail.decode("utf-8", "replace").splitlines())
    reports = [(i, m) for i, line in enumerate(lines) if (m := _TOKENS.match(line))]
    after = lines[reports[-1][0] + 1 :] if reports else lines
    errors = _error_lines(after[-text.WINDOW_LINES :], retry_context=prose)
    # The exception names the error ("exceeded your current quota"); aider's explanation
    # after it is generic ("has rate limited you"), so it decides only on its own.
    found = text.scan_messages([e for e in errors if _LITELLM.match(e)], now=now)
    if found == Findings():
        found = text.scan_messages(errors, now=now)
    model = next((m.group("model") for line in lines if (m := _MODEL.match(line))), None)
    usage = _usage([m for _, m in reports], [lines[i] for i, _ in reports], model)
    return replace(found, usage=usage)


def _unwrapped(raw_lines: list[str]) -> list[str]:
    """Non-blank lines, each litellm message joined with the lines aider wrapped it onto."""
    lines: list[str] = []
    joining = False
    for raw in raw_lines:
        line = raw.strip()
        if not line:
            # aider ends a message with a blank line (a docs URL may follow on its own).
            joining = False
            continue
        if joining and not _starts_a_line(line) and len(lines[-1]) < MAX_MESSAGE_CHARS:
            lines[-1] += " " + line
            continue
        lines.append(line)
        joining = _LITELLM.match(line) is not None
    return lines


def _starts_a_line(line: str) -> bool:
    return any(p.match(line) for p in (_ERROR_LINE, _RETRYING, _ACTION, _TOKENS))


def _error_lines(lines: list[str], *, retry_context: bool) -> list[str]:
    picked = [False] * len(lines)
    for i, line in enumerate(lines):
        if _ACTION.match(line):
            continue
        if _ERROR_LINE.match(line):
            picked[i] = True
        elif _RETRYING.match(line) and retry_context:
            # aider prints the exception (any shape) and its explanation just before.
            for j in range(max(0, i - _RETRY_CONTEXT_LINES), i):
                picked[j] = picked[j] or not _ACTION.match(lines[j])
    return [line for line, keep in zip(lines, picked, strict=True) if keep]


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
