"""Transcript parsers: read the end of a round's transcript and report what the agent hit.

The parser is chosen by `[agent] parser`, never by the binary's name. Parsing is pure
and bounded: only the last TAIL_BYTES of the file are read, and no input makes it raise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_runner.parsers import (
    aider,
    claude,
    codex,
    copilot,
    gemini,
    generic,
    opencode,
    qwen,
    text,
)
from agent_runner.parsers.findings import TRANSIENT_CLASSES, Findings, Transient, Usage
from agent_runner.parsers.retries import announced_wait
from agent_runner.parsers.tail import read_tail
from agent_runner.patterns import GENERIC_PARSER, NO_PATTERNS, Patterns

__all__ = [
    "PARSER_NAMES",
    "TAIL_BYTES",
    "TRANSIENT_CLASSES",
    "Findings",
    "Transient",
    "Usage",
    "announced_wait",
    "parse_tail",
    "parse_transcript",
    "read_transcript_tail",
    "reads_transcript",
    "report_findings",
]

TAIL_BYTES = 256 * 1024

Parser = Callable[..., Findings]


def _parse_nothing(tail: bytes, *, now: float, prose: bool = True) -> Findings:
    return Findings()


_PARSERS: dict[str, Parser] = {
    "claude": claude.parse,
    # The demo agent speaks Claude's stream-json, so the same reading applies.
    "demo": claude.parse,
    "codex": codex.parse,
    "gemini": gemini.parse,
    "aider": aider.parse,
    "text": text.parse,
    "opencode": opencode.parse,
    "qwen": qwen.parse,
    "copilot": copilot.parse,
    "none": _parse_nothing,
}
# `generic` reads the operator's [agent.patterns] (passed in as `patterns`), no format of its own.
PARSER_NAMES: frozenset[str] = frozenset({*_PARSERS, GENERIC_PARSER})


def parse_transcript(
    parser: str,
    path: Path,
    *,
    now: float,
    exit_cause: str | None = None,
    patterns: Patterns = NO_PATTERNS,
) -> Findings:
    """Read the tail of `path` and report. Unknown parser: KeyError; unreadable file: Findings().

    After a `clean` exit, findings read from prose (the plain-text fallbacks) are dropped: the
    CLI said it succeeded, so a limit message in its text is the agent's own words. Structured
    JSON findings still count. `patterns` are what the `generic` parser reads.
    """
    if not reads_transcript(parser):
        return Findings()
    tail = read_transcript_tail(path)
    return parse_tail(parser, tail, now=now, exit_cause=exit_cause, patterns=patterns)


def reads_transcript(parser: str) -> bool:
    """Whether `parser` reads anything (`none` does not). Unknown parser: KeyError."""
    return parser == GENERIC_PARSER or _PARSERS[parser] is not _parse_nothing


def read_transcript_tail(path: Path) -> bytes:
    """The last TAIL_BYTES of `path` from a line boundary; b"" when it cannot be read."""
    try:
        return read_tail(path, TAIL_BYTES)
    except OSError:
        return b""


def parse_tail(
    parser: str,
    tail: bytes,
    *,
    now: float,
    exit_cause: str | None = None,
    patterns: Patterns = NO_PATTERNS,
) -> Findings:
    """`parse_transcript` of a tail already read with `read_transcript_tail`."""
    prose = exit_cause != "clean"
    if parser == GENERIC_PARSER:
        return generic.parse(tail, now=now, prose=prose, patterns=patterns)
    return _PARSERS[parser](tail, now=now, prose=prose)


def report_findings(findings: Findings, *, round_no: int, emit: Callable[..., Any]) -> None:
    """Emit one event per finding, each carrying the round number."""
    if findings.transient is not None:
        emit(
            "transient_error_detected",
            round=round_no,
            classification=findings.transient.classification,
            reset_at=findings.transient.reset_at,
            detail=findings.transient.detail,
        )
    if findings.auth_error is not None:
        emit("agent_auth_error_detected", round=round_no, reason=findings.auth_error)
    if findings.setup_error is not None:
        emit("agent_setup_error_detected", round=round_no, reason=findings.setup_error)
    if findings.usage is not None:
        usage = findings.usage
        emit(
            "agent_usage_recorded",
            round=round_no,
            model=usage.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_creation_tokens=usage.cache_creation_tokens,
            cost_usd=usage.cost_usd,
        )
