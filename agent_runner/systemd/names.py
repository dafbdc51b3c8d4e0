"""Unit names: a project folder as a systemd-escaped instance, and text safe to write into a unit.

The escaping is systemd's own (`systemd-escape --path`), so `%f` in the template gives the
folder back. Anything written literally into a unit file goes through `check_unit_text` first.
"""

from __future__ import annotations

import string
from pathlib import PurePosixPath

from agent_runner.errors import SystemdError

PREFIX = "agent-runner"
TEMPLATE = f"{PREFIX}@.service"
# systemd's UNIT_NAME_MAX (256) counts the terminating NUL.
UNIT_NAME_MAX = 255
_PLAIN = frozenset(string.ascii_letters + string.digits + ":_.")
# Characters that mean something to the unit file parser, to specifier expansion (%) or to
# ExecStart's quoting and $VARIABLE substitution; control characters end or split a line.
_UNSAFE = frozenset("%\"'\\$")


def escape_path(path: str) -> str:
    """`systemd-escape --path PATH`: the instance name of a folder."""
    if not path.startswith("/"):
        raise SystemdError(f"{path!r} is not an absolute path")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise SystemdError(f"{path!r} is not a normalized path (it contains '..')")
    if not parts:
        return "-"
    out = []
    for index, char in enumerate("/".join(parts)):
        if char == "/":
            out.append("-")
        elif char in _PLAIN and not (index == 0 and char == "."):
            out.append(char)
        else:
            # Non-ASCII characters are escaped byte by byte, as UTF-8.
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8", "surrogateescape"))
    return "".join(out)


def unescape_path(name: str) -> str:
    """`systemd-escape --unescape --path NAME`: the folder an instance name stands for (`%f`)."""
    if name == "-":
        return "/"
    raw = bytearray()
    index = 0
    while index < len(name):
        char = name[index]
        if char == "\\":
            digits = name[index + 2 : index + 4]
            if name[index + 1 : index + 2] != "x" or len(digits) != 2 or not _is_hex(digits):
                raise SystemdError(f"{name!r}: bad escape at position {index}")
            raw.append(int(digits, 16))
            index += 4
            continue
        raw.extend(b"/" if char == "-" else char.encode())
        index += 1
    path = "/" + raw.decode("utf-8", "surrogateescape")
    if "//" in path or path.endswith("/"):
        raise SystemdError(f"{name!r} is not an escaped path (empty component)")
    return path


def unit_name(project_dir: str) -> str:
    """`agent-runner@<escaped folder>.service`, refused when systemd could not load it."""
    name = f"{PREFIX}@{escape_path(project_dir)}.service"
    if len(name) > UNIT_NAME_MAX:
        raise SystemdError(
            f"{project_dir}: the unit name would be {len(name)} characters; systemd allows "
            f"{UNIT_NAME_MAX} (move the project to a shorter path)"
        )
    return name


def check_unit_text(value: str, what: str) -> str:
    """The value, unchanged, if it can be written into a unit file as it is; else SystemdError."""
    for char in value:
        if char in _UNSAFE or not char.isprintable():
            raise SystemdError(
                f"{what} {value!r} contains {char!r}, which could change the unit's meaning; "
                "rename or move it"
            )
    return value


def check_project_dir(path: str) -> str:
    """A project folder safe to install: absolute, normalized and free of unit syntax."""
    check_unit_text(path, "project folder")
    if str(PurePosixPath(path)) != path or not path.startswith("/"):
        raise SystemdError(f"project folder {path!r} is not an absolute, normalized path")
    return path


def _is_hex(text: str) -> bool:
    return all(char in string.hexdigits for char in text)
