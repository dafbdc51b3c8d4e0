"""Find JSON objects in transcript text: one per line, glued to text, or pretty-printed.

Never raises on any input; work is bounded per line so garbage cannot make it slow.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

_DECODER = json.JSONDecoder()
_OBJECT_START = re.compile(r'\{\s*["}]')
MAX_FAILED_ATTEMPTS_PER_LINE = 32
MAX_BLOCK_CANDIDATES = 8


def decode_at(text: str, pos: int) -> tuple[dict[str, Any], int] | None:
    """The JSON object starting at `pos` and the index just past it, or None."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        return None
    return (value, end) if isinstance(value, dict) else None


def objects_in_line(line: str) -> Iterator[dict[str, Any]]:
    """Every top-level JSON object in one line, including ones glued to other text."""
    pos, failures = 0, 0
    while failures < MAX_FAILED_ATTEMPTS_PER_LINE:
        match = _OBJECT_START.search(line, pos)
        if match is None:
            return
        decoded = decode_at(line, match.start())
        if decoded is None:
            failures += 1
            pos = match.start() + 1
            continue
        yield decoded[0]
        pos = decoded[1]


def split_lines(text: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each line of `text` with the JSON objects found in it (empty list: a plain-text line)."""
    return [(line, list(objects_in_line(line))) for line in text.splitlines()]


def pretty_printed_objects(text: str) -> list[dict[str, Any]]:
    """Multi-line objects that start with a `{` alone at column 0, the last few only."""
    starts = [m.start() for m in re.finditer(r"(?m)^\{[ \t]*$", text)]
    found = []
    for start in starts[-MAX_BLOCK_CANDIDATES:]:
        decoded = decode_at(text, start)
        if decoded is not None:
            found.append(decoded[0])
    return found


def as_int(value: Any) -> int | None:
    """An integer field, or None for anything else (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_float(value: Any) -> float | None:
    """A finite numeric field as float, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    # JSON from a CLI may carry NaN or Infinity; neither is a time or a cost.
    return number if math.isfinite(number) else None


def as_dict(value: Any) -> dict[str, Any]:
    """A JSON object field, or an empty dict."""
    return value if isinstance(value, dict) else {}


def as_str(value: Any) -> str:
    """A string field, or an empty string."""
    return value if isinstance(value, str) else ""
