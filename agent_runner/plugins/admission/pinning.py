"""`plugins pin`: write one plugin's digest into `[plugins.pin]`, the rest of the file untouched.

The edit changes one line (or adds one, or appends the table), is checked by parsing the
result (every other value must be unchanged and the config must still load), and replaces
the file atomically. When it cannot be done that safely it refuses and says what to add.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from agent_runner.config import parse_config
from agent_runner.errors import AgentRunnerError, ConfigError
from agent_runner.plugins.admission.discovery import Candidate
from agent_runner.plugins.admission.trust import assess, provenance, shared_names

TARGET_TABLE = ("plugins", "pin")
_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_DOTTED = rf"{_PART}(?:[ \t]*\.[ \t]*{_PART})*"
_STRING = r"""(?:"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_HEADER = re.compile(rf"[ \t]*\[[ \t]*({_DOTTED})[ \t]*\][ \t]*(?:#.*)?")
_ARRAY_HEADER = re.compile(rf"[ \t]*\[\[[ \t]*({_DOTTED})[ \t]*\]\][ \t]*(?:#.*)?")
_STRING_PAIR = re.compile(rf"([ \t]*({_DOTTED})[ \t]*=[ \t]*){_STRING}([ \t]*(?:#.*)?)")
_PAIR = re.compile(rf"[ \t]*({_DOTTED})[ \t]*=")
_KEY_PART = re.compile(_PART)


class PinRefused(AgentRunnerError):
    """`plugins pin` will not write this pin (unknown name, squatter, unverifiable files)."""


@dataclass(frozen=True)
class PinResult:
    """What `plugins pin` did."""

    digest: str
    previous: str | None
    path: Path
    written: bool


def pin_plugin(
    config_path: Path, pins: dict[str, str], name: str, candidates: list[Candidate], package: Path
) -> PinResult:
    """Compute `name`'s digest and write it into the config file at `config_path`."""
    digest = current_digest(name, candidates, package)
    previous = pins.get(name)
    if previous == digest:
        return PinResult(digest, previous, config_path, written=False)
    target = Path(os.path.realpath(config_path))
    original = target.read_bytes()
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{config_path}: not UTF-8 text") from None
    edited = set_pin(text, name, digest)
    check_edit(text, edited, name, digest, config_path)
    try:
        replace_file(target, original, edited.encode("utf-8"))
    except OSError as exc:
        raise PinRefused(f"{target}: cannot replace the file: {exc.strerror or exc}") from None
    return PinResult(digest, previous, config_path, written=True)


def current_digest(name: str, candidates: list[Candidate], package: Path) -> str:
    """The digest to pin for `name`; PinRefused unless it is one verifiable third-party entry."""
    matching = [c for c in candidates if c.name == name]
    kinds = [provenance(c, package) for c in matching]
    if not matching:
        known = sorted({c.name for c in candidates})
        raise PinRefused(
            f"no installed plugin is named {name!r}"
            + (f" (discovered: {', '.join(known)})" if known else " (none is discovered)")
        )
    if "squatter" in kinds:
        squat = matching[kinds.index("squatter")]
        raise PinRefused(
            f"{name!r} from {squat.dist.name} ({squat.module}) claims a builtin's name or "
            "agent-runner's package; it is not pinned"
        )
    if kinds == ["builtin"] * len(kinds):
        raise PinRefused(f"{name!r} is builtin: part of agent-runner itself, never pinned")
    third_party = [c for c, kind in zip(matching, kinds, strict=True) if kind != "builtin"]
    shared = shared_names(third_party, ["third-party"] * len(third_party)).get(name, ())
    checked = assess(third_party[0], None, "third-party", shared)
    if checked.verified is None or checked.digest is None:
        raise PinRefused(f"{name!r} cannot be pinned: {checked.reason}")
    return checked.digest


def set_pin(text: str, name: str, digest: str) -> str:
    """`text` with `name`'s pin set to `digest`, changing or adding exactly one line
    (or appending a `[plugins.pin]` table when there is none)."""
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    table: tuple[str, ...] = ()
    in_target = False
    insert_at: int | None = None
    delimiter: str | None = None
    for index, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if delimiter is not None:
            if body.count(delimiter) % 2 == 1:
                delimiter = None
            continue
        if header := _ARRAY_HEADER.fullmatch(body) or _HEADER.fullmatch(body):
            table = _key_path(header.group(1))
            in_target = table == TARGET_TABLE
            if in_target:
                insert_at = index + 1
            continue
        pair = _PAIR.match(body)
        if pair is None:
            delimiter = _opens_multiline(body)
            continue
        if table + _key_path(pair.group(1)) == (*TARGET_TABLE, name):
            value = _STRING_PAIR.fullmatch(body)
            if value is None:
                raise PinRefused(_by_hand(name, digest, "its value is not a one-line string"))
            edited = value.group(1) + _string(digest) + value.group(3) + line[len(body) :]
            return "".join([*lines[:index], edited, *lines[index + 1 :]])
        if in_target:
            insert_at = index + 1
        delimiter = _opens_multiline(body)
    entry = tomli_w.dumps({name: digest}).rstrip("\n") + newline
    if insert_at is not None:
        if insert_at > 0 and not lines[insert_at - 1].endswith("\n"):
            lines[insert_at - 1] += newline
        return "".join([*lines[:insert_at], entry, *lines[insert_at:]])
    tail = "" if not text or text.endswith("\n") else newline
    return text + tail + newline + "[plugins.pin]" + newline + entry


def _key_path(dotted: str) -> tuple[str, ...]:
    """`a."b.c".d` -> ("a", "b.c", "d"), decoded exactly as TOML does."""
    parts = []
    for match in _KEY_PART.finditer(dotted):
        part = match.group(0)
        parts.append(part if part[0] not in "\"'" else tomllib.loads(f"k = {part}")["k"])
    return tuple(parts)


def _opens_multiline(body: str) -> str | None:
    """The delimiter of a multi-line string this line opens and leaves open, if any."""
    for delimiter in ('"""', "'''"):
        if body.count(delimiter) % 2 == 1:
            return delimiter
    return None


def _string(value: str) -> str:
    return tomli_w.dumps({"k": value}).partition("=")[2].strip()


def _by_hand(name: str, digest: str, why: str) -> str:
    line = tomli_w.dumps({name: digest}).strip()
    return f"cannot edit the pin for {name!r} safely ({why}); put `{line}` under [plugins.pin]"


def check_edit(before: str, after: str, name: str, digest: str, path: Path) -> None:
    """The edited text must mean the old document plus this one pin, and still load."""
    try:
        old, new = tomllib.loads(before), tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        raise PinRefused(_by_hand(name, digest, "the edit would not parse")) from None
    expected = _with_pin(old, name, digest)
    if new != expected:
        raise PinRefused(_by_hand(name, digest, "the file's layout is unusual"))
    parse_config(new, path)


def _with_pin(document: dict[str, Any], name: str, digest: str) -> dict[str, Any]:
    plugins = dict(document.get("plugins", {}))
    plugins["pin"] = {**plugins.get("pin", {}), name: digest}
    return {**document, "plugins": plugins}


def replace_file(path: Path, original: bytes, data: bytes) -> None:
    """Replace `path` with `data` atomically, keeping its mode and owner; refuse when the
    file changed since `original` was read."""
    info = os.stat(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.pin")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, stat.S_IMODE(info.st_mode))
    try:
        try:
            if os.geteuid() == 0:
                os.fchown(fd, info.st_uid, info.st_gid)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if path.read_bytes() != original:
            raise PinRefused(f"{path} changed while the pin was being written; run it again")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
