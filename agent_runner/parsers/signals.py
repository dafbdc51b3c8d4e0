"""Shared vocabulary: HTTP status to classification, auth and setup phrases, redacted one-liners.

Everything a parser puts into `detail` or an auth reason goes through `short_redacted`.
"""

from __future__ import annotations

import re

from agent_runner.redaction import redact

MAX_DETAIL_CHARS = 200

_STATUS_CLASSES = {
    408: "api_timeout",
    429: "rate_limit_model",
    500: "api_transient_5xx",
    502: "api_transient_5xx",
    503: "api_transient_5xx",
    504: "api_transient_5xx",
    529: "api_transient_5xx",
}
AUTH_STATUSES = frozenset({401, 403})
# Messages are short; a longer line is agent output, and scanning it whole is slow.
MAX_MESSAGE_CHARS = 2048

AUTH_TEXT = re.compile(
    r"(?i)(?:status|code|error)[^\d\n]{0,12}\b401\b|\b401\b[^\n]{0,20}unauthori"
    r"|unauthori[sz]ed|authentication[_ ]?(?:error|failed)|authenticationerror"
    r"|invalid[ _-]?(?:x-)?api[ _-]?key|incorrect api key|api key not valid|invalid_api_key"
    r"|not able to authenticate|run /login|please (?:log ?in|login|sign in)|not logged in"
    r"|log in again|login required|no authentication information found"
    r"|oauth token (?:has )?(?:expired|been revoked)|token_expired|token_revoked|invalid_grant"
    r"|refresh token (?:has )?(?:expired|been revoked|was already used)"
)


# A CLI that cannot run in this setup at all: retrying changes nothing until someone fixes it.
SETUP_TEXT = re.compile(
    r"(?i)not running in a trusted (?:directory|folder)|invalid auth method selected"
    r"|please set an auth method|must specify the gemini_api_key|no auth type is selected"
    r"|model [`'\"][^`'\"\n]{1,80}[`'\"] (?:does not exist|not found)|models/\S+ is not found"
    r"|model_not_found"
    r"|not_found_error[^\n]{0,60}\bmodel\b|issue with the selected model"
)
_SETUP_HINTS = ("trusted", "auth method", "auth type", "gemini_api_key", "model")


def looks_like_setup_error(text: str) -> bool:
    """True when a message says the CLI cannot start here (trust, auth type, unknown model)."""
    text = text[:MAX_MESSAGE_CHARS]
    lowered = text.lower()
    return any(hint in lowered for hint in _SETUP_HINTS) and SETUP_TEXT.search(text) is not None


_AUTH_HINTS = (
    "401", "unauthori", "authenticat", "api key", "api_key", "api-key", "apikey",
    "login", "log in", "logged in", "sign in", "token", "invalid_grant",
)  # fmt: skip


def looks_like_auth_failure(text: str) -> bool:
    """True when a message says the credentials were refused or a log-in is needed."""
    text = text[:MAX_MESSAGE_CHARS]
    lowered = text.lower()
    # The substring test is a cheap gate in front of the slow alternation.
    return any(hint in lowered for hint in _AUTH_HINTS) and AUTH_TEXT.search(text) is not None


def classify_status(status: int | None) -> str | None:
    """The transient class an HTTP status means, or None (success, auth, or a client error)."""
    return None if status is None else _STATUS_CLASSES.get(status)


def short_redacted(text: str) -> str:
    """One line, at most MAX_DETAIL_CHARS, with anything that looks like a secret masked."""
    line = redact(" ".join(text.split())[: MAX_DETAIL_CHARS * 5])
    if len(line) > MAX_DETAIL_CHARS:
        line = line[: MAX_DETAIL_CHARS - 1] + "…"
    # Lone surrogates from odd JSON escapes would break the UTF-8 event writer.
    return line.encode("utf-8", "replace").decode("utf-8")
