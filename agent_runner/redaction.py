"""The one table of secret shapes masked in everything serve writes from untrusted text.

Events (every string field) and the reasons parsers take from transcripts both go through
`redact`. A replacement keeps the label that says what was there, never the secret.
"""

from __future__ import annotations

import re

REDACTED = "[REDACTED]"

SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # A JWT (also an OAuth access token): three base64url parts, the first one `{"...`.
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"), REDACTED),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]+"), rf"\1{REDACTED}"),
    (re.compile(r"\b(sk-)[A-Za-z0-9_\-]{8,}"), rf"\1{REDACTED}"),
    (re.compile(r"\b(AKIA)[0-9A-Z]{16}\b"), rf"\1{REDACTED}"),
    (re.compile(r"\b(AIza)[0-9A-Za-z_\-]{20,}"), rf"\1{REDACTED}"),
    (re.compile(r"\b(gh[pousr]_|github_pat_)[A-Za-z0-9_]{16,}"), rf"\1{REDACTED}"),
    (re.compile(r"\b(xox[abprs]-)[A-Za-z0-9\-]{10,}"), rf"\1{REDACTED}"),
    # `api_key=…`, `"password": "…"`, `x-api-key: …`: the name stays, the value goes.
    (
        re.compile(
            r"(?i)\b((?:x-)?api[-_ ]?key|access[-_]?token|refresh[-_]?token|client[-_]?secret"
            r"|secret[-_]?key|password)([\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+"
        ),
        rf"\1\2{REDACTED}",
    ),
)


def redact(text: str) -> str:
    """`text` with every secret shape in the table masked."""
    for pattern, replacement in SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text
