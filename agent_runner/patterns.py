"""`[agent.patterns]`: the operator's regular expressions for the `generic` parser, checked once.

A pattern is refused when it cannot compile, when it matches the empty string (every line would
count), when it names a group its kind does not read, or when it nests an unbounded repetition
(`(a+)+`, `(\\w|\\d)*`): Python's regex engine backtracks, and such a pattern can take
exponential time on one hostile line. What it is matched against is bounded too: each line is
cut to MATCHED_CHARS before matching (docs/agents.md, "generic").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

GENERIC_PARSER = "generic"  # the one parser that reads them
# The error kinds, each with the class the loop gives it; None: not a transient.
KINDS: dict[str, str | None] = {
    "rate_limit": "rate_limit_model",
    "quota": "rate_limit_account",
    "outage": "api_transient_5xx",
    "auth": None,
    "setup": None,
    "usage": None,
}
RESET_GROUP = "reset"
USAGE_GROUPS = (
    "model",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
    "cost_usd",
)
_GROUPS: dict[str, tuple[str, ...]] = {
    "rate_limit": (RESET_GROUP,),
    "quota": (RESET_GROUP,),
    "usage": USAGE_GROUPS,
}
MAX_PATTERN_CHARS = 1000
# Each line is cut to this before any pattern sees it: the longest text a pattern can be slow on.
MATCHED_CHARS = 1024


class PatternError(ValueError):
    """One pattern refused: the key it is under and why (one line)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class Patterns:
    """The compiled patterns, by kind (`KINDS`); an empty mapping reads nothing."""

    compiled: Mapping[str, re.Pattern[str]]


NO_PATTERNS = Patterns({})


def compile_patterns(raw: Mapping[str, str]) -> Patterns:
    """Compile and check every pattern; PatternError names the first one refused."""
    compiled = {}
    for key, source in raw.items():
        if key not in KINDS:
            raise PatternError(key, f"unknown pattern; known: {', '.join(KINDS)}")
        compiled[key] = _compile(key, source)
    return Patterns(compiled)


def _compile(key: str, source: str) -> re.Pattern[str]:
    if not source:
        raise PatternError(key, "must not be empty")
    if len(source) > MAX_PATTERN_CHARS:
        raise PatternError(key, f"longer than {MAX_PATTERN_CHARS} characters")
    try:
        pattern = re.compile(source)
    except (re.error, OverflowError) as exc:
        raise PatternError(key, f"not a regular expression: {exc}") from None
    except RecursionError:
        raise PatternError(key, "not a regular expression: nested too deeply") from None
    if pattern.search("") is not None:
        raise PatternError(key, "matches the empty string, so it would match every line")
    allowed = _GROUPS.get(key, ())
    for name in pattern.groupindex:
        if name not in allowed:
            wanted = ", ".join(allowed) if allowed else "none"
            raise PatternError(key, f"names a group {name!r} it does not read (groups: {wanted})")
    if key == "usage" and not pattern.groupindex:
        raise PatternError(key, f"names none of the groups {', '.join(USAGE_GROUPS)}")
    if _nested_repeat(_parsed(source)):
        raise PatternError(
            key,
            "repeats a repetition or an alternation (like (a+)+ or (a|bc)*), which can take"
            " exponential time on one line: use one repetition of a character class, or a"
            " possessive (a++) or atomic ((?>...)) group",
        )
    return pattern


def _parsed(source: str) -> Any:
    # The parse tree of the compiled engine's own front end: what it will actually run.
    from re import _parser  # type: ignore[attr-defined]  # noqa: PLC0415

    return _parser.parse(source)


_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _nested_repeat(tree: Any, inside: bool = False) -> bool:
    """True when a repetition (of more than one) holds another one or an alternation.

    Possessive repetitions and atomic groups are never backtracked into: allowed anywhere.
    """
    for op, arg in tree:
        name = str(op)
        if name in _REPEATS:
            _low, high, body = arg
            if name == "POSSESSIVE_REPEAT":
                continue
            if inside and high > 1:
                return True
            if _nested_repeat(body, inside or high > 1):
                return True
        elif name == "BRANCH":
            if inside:
                return True
            if any(_nested_repeat(branch, inside) for branch in arg[1]):
                return True
        elif name in ("SUBPATTERN", "ATOMIC_GROUP", "ASSERT", "ASSERT_NOT"):
            if name == "ATOMIC_GROUP":
                continue
            if any(_nested_repeat(part, inside) for part in _subtrees(name, arg)):
                return True
    return False


def _subtrees(name: str, arg: Any) -> Iterator[Any]:
    if name == "SUBPATTERN":
        yield arg[3]  # (group, add_flags, del_flags, pattern)
    else:
        yield arg[1]  # (direction, pattern)
