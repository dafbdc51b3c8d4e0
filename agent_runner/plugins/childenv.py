"""The environment the fork server and every plugin child inherit: an allow-list, nothing else.

Names are listed one by one (SSH forwards any `LC_*` a client sends, so a prefix would let
`LC_GITHUB_TOKEN=...` through), and locale values must look like locale names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PASSED = ("PATH", "TZ")
# The POSIX locale categories, and LANG, which sets the default for all of them.
LOCALE = (
    "LANG",
    "LC_ALL",
    "LC_COLLATE",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_MONETARY",
    "LC_NUMERIC",
    "LC_TIME",
)
# language[_territory][.codeset][@modifier] (en_US.UTF-8, sr_RS@latin, de), C, POSIX, C.UTF-8.
_LOCALE_NAME = re.compile(
    r"(?:C|POSIX|[a-z]{2,3}(?:_(?:[A-Z]{2}|[0-9]{3}))?)(?:\.[A-Za-z0-9][A-Za-z0-9-]{0,15})?"
    r"(?:@[a-z]{1,16})?"
)


def allowed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of `environ` a child may see: PATH, TZ, and well-formed locale settings."""
    kept = {name: environ[name] for name in PASSED if name in environ}
    kept.update(
        (name, environ[name])
        for name in LOCALE
        if name in environ and _LOCALE_NAME.fullmatch(environ[name])
    )
    return kept
