"""Plugin discovery: `agent_runner.plugins` entry points read from installed metadata.

Nothing is imported: each `*.dist-info` directory on the search path is read with bounded,
no-follow reads of regular files only, so a hostile install can neither run code nor hang us.
"""

from __future__ import annotations

import csv
import email.parser
import errno
import io
import json
import os
import stat
import sys
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

GROUP = "agent_runner.plugins"
MAX_METADATA_BYTES = 1 << 20
MAX_RECORD_BYTES = 8 << 20
CHUNK_BYTES = 1 << 20
MAX_NAME_CHARS = 200
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafeFile(Exception):
    """A file of an installed distribution cannot be read safely (missing, link, not regular)."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class RecordEntry:
    """One RECORD line: the path relative to the site directory, its hash and size as listed."""

    path: str
    algorithm: str | None
    digest: str | None
    size: int | None


@dataclass(frozen=True)
class Distribution:
    """An installed distribution that declares plugin entry points.

    `problem` says why its metadata could not be read completely; `record` is None when
    there is no RECORD; `editable_dir` is the source folder of an editable install.
    """

    name: str
    version: str
    site: Path
    info_dir: str
    record: tuple[RecordEntry, ...] | None
    editable_dir: Path | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Candidate:
    """One discovered entry point: its name, its `module:attr` value and who declares it."""

    name: str
    value: str
    dist: Distribution

    @property
    def module(self) -> str:
        """The module part of the value (`pkg.mod` in `pkg.mod:PLUGIN`)."""
        return self.value.partition(":")[0].strip()


def search_path(entries: Sequence[str], *, cwd: Path | None, work_dir: Path | None) -> list[Path]:
    """The folders to discover in: `entries` (sys.path) resolved, deduplicated, and without
    '' , the current directory or anything under work_dir."""
    here = Path(os.path.realpath(cwd)) if cwd is not None else None
    work = Path(os.path.realpath(work_dir)) if work_dir is not None else None
    folders: list[Path] = []
    for entry in entries:
        if not entry or "\0" in entry or (here is None and not os.path.isabs(entry)):
            continue
        folder = Path(os.path.realpath(os.path.join(here or "/", entry)))
        if folder == here or (work is not None and folder.is_relative_to(work)):
            continue
        if folder not in folders and folder.is_dir():
            folders.append(folder)
    return folders


def installed(work_dir: Path | None) -> list[Candidate]:
    """The entry points installed for this interpreter (`sys.path`), never from cwd or work_dir."""
    try:
        cwd = Path.cwd()
    except FileNotFoundError:
        cwd = None  # removed under us: no path entry can be it
    return discover(search_path(sys.path, cwd=cwd, work_dir=work_dir))


def inside_work_dir(work_dir: Path) -> list[Candidate]:
    """Entry points installed on `sys.path` inside work_dir: never discovered, worth a warning."""
    work = Path(os.path.realpath(work_dir))
    folders = {
        Path(os.path.realpath(entry))
        for entry in sys.path
        if os.path.isabs(entry) and "\0" not in entry
    }
    return discover(sorted(f for f in folders if f.is_relative_to(work) and f.is_dir()))


def discover(folders: Sequence[Path]) -> list[Candidate]:
    """Every entry point of the plugin group declared in `folders`, in search-path order.

    Two distributions declaring one name are both returned; nothing is shadowed.
    """
    found: list[Candidate] = []
    for site in folders:
        for info_dir in _metadata_dirs(site):
            found.extend(_candidates(site, info_dir))
    return found


def _metadata_dirs(site: Path) -> list[str]:
    try:
        names = os.listdir(site)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith((".dist-info", ".egg-info")))


def _candidates(site: Path, info_dir: str) -> Iterator[Candidate]:
    try:
        text = read_beneath(site, f"{info_dir}/entry_points.txt", MAX_METADATA_BYTES)
    except UnsafeFile as exc:
        if exc.missing:
            return
        # A plugin distribution we cannot read is reported under its folder's name.
        yield Candidate(info_dir, "", _broken(site, info_dir, str(exc)))
        return
    try:
        entries = _entry_points(text)
    except ValueError as exc:
        problem = f"{info_dir}/entry_points.txt: {exc}"
        yield Candidate(info_dir, "", _broken(site, info_dir, problem))
        return
    if not entries:
        return
    dist = _distribution(site, info_dir)
    for name, value in entries:
        yield Candidate(name, value, dist)


def _entry_points(data: bytes) -> list[tuple[str, str]]:
    """The group's `(name, value)` pairs, read as importlib.metadata reads entry_points.txt."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    section, pairs = None, []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]").strip()
            continue
        name, equals, value = line.partition("=")
        if not equals:
            raise ValueError(f"line {number}: expected name = value")
        if section == GROUP:
            pairs.append((_printable(name.strip()), _printable(value.strip())))
    names = [name for name, _ in pairs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"declares {twice[0]!r} twice")
    too_long = [name for name, value in pairs if len(name) > MAX_NAME_CHARS or len(value) > 500]
    if too_long:
        raise ValueError(f"an entry point longer than {MAX_NAME_CHARS} characters")
    return pairs


def _printable(text: str) -> str:
    """`text` with anything a terminal would interpret replaced by '?'."""
    return "".join(char if char.isprintable() else "?" for char in text)


def _broken(site: Path, info_dir: str, problem: str) -> Distribution:
    name, _, version = info_dir.rpartition(".")[0].partition("-")
    return Distribution(name, version, site, info_dir, None, problem=problem)


def _distribution(site: Path, info_dir: str) -> Distribution:
    try:
        headers = email.parser.BytesHeaderParser().parsebytes(
            read_beneath(site, f"{info_dir}/METADATA", MAX_METADATA_BYTES)
            if info_dir.endswith(".dist-info")
            else read_beneath(site, f"{info_dir}/PKG-INFO", MAX_METADATA_BYTES)
        )
    except UnsafeFile as exc:
        return _broken(site, info_dir, str(exc))
    name = _printable(str(headers.get("Name") or "").strip())[:MAX_NAME_CHARS] or info_dir
    version = _printable(str(headers.get("Version") or "").strip())[:MAX_NAME_CHARS]
    if info_dir.endswith(".egg-info"):
        problem = "installed as .egg-info, which has no RECORD to verify"
        return Distribution(name, version, site, info_dir, None, problem=problem)
    try:
        record = parse_record(read_beneath(site, f"{info_dir}/RECORD", MAX_RECORD_BYTES))
    except UnsafeFile as exc:
        return Distribution(name, version, site, info_dir, None, problem=str(exc))
    except ValueError as exc:
        problem = f"{info_dir}/RECORD: {exc}"
        return Distribution(name, version, site, info_dir, None, problem=problem)
    return Distribution(name, version, site, info_dir, record, _editable_dir(site, info_dir))


def parse_record(data: bytes) -> tuple[RecordEntry, ...]:
    """RECORD's CSV rows as entries; ValueError names the first malformed line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ValueError(f"not CSV: {exc}") from None
    entries = []
    for number, row in enumerate(rows, start=1):
        if not row:
            continue
        if len(row) != 3 or not row[0]:
            raise ValueError(f"line {number}: expected path,hash,size")
        path, hashed, size = row
        algorithm, _, digest = hashed.partition("=")
        if hashed and not digest:
            raise ValueError(f"line {number}: hash is not algorithm=value")
        if size and not size.isdigit():
            raise ValueError(f"line {number}: size is not a number")
        entries.append(
            RecordEntry(path, algorithm or None, digest or None, int(size) if size else None)
        )
    return tuple(entries)


def _editable_dir(site: Path, info_dir: str) -> Path | None:
    """The source folder PEP 660's direct_url.json names for an editable install, else None."""
    try:
        data = json.loads(read_beneath(site, f"{info_dir}/direct_url.json", MAX_METADATA_BYTES))
    except (UnsafeFile, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("dir_info"), dict):
        return None
    url = data.get("url")
    if data["dir_info"].get("editable") is not True or not isinstance(url, str):
        return None
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError:
        return None
    folder = urllib.parse.unquote(parsed.path)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or "\0" in folder:
        return None
    return Path(folder)


def open_beneath(site: Path, relative: str) -> int:
    """A descriptor for `site/relative`, a regular file reached through no symlink at all."""
    parts = relative.split("/")
    try:
        folder = os.open(site, _DIR_FLAGS)
    except OSError as exc:
        raise _unsafe(str(site), exc) from None
    try:
        for depth, part in enumerate(parts[:-1], start=1):
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=folder)
            except OSError as exc:
                raise _unsafe("/".join(parts[:depth]), exc, _is_link(folder, part)) from None
            os.close(folder)
            folder = inner
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=folder)
        except OSError as exc:
            raise _unsafe(relative, exc) from None
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeFile(f"{relative}: not a regular file")
    return fd


def _is_link(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False


def read_beneath(site: Path, relative: str, limit: int) -> bytes:
    """The bytes of `site/relative` (see `open_beneath`); more than `limit` is refused."""
    fd = open_beneath(site, relative)
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise _unsafe(relative, exc) from None
    if len(data) > limit:
        raise UnsafeFile(f"{relative}: larger than {limit} bytes")
    return data


def _unsafe(what: str, exc: OSError, link: bool = False) -> UnsafeFile:
    if link:
        return UnsafeFile(f"{what}: is a symlink")
    reasons = {
        errno.ENOENT: "not found",
        errno.ELOOP: "is a symlink",
        errno.ENOTDIR: "a path component is not a folder",
    }
    reason = reasons.get(exc.errno or 0, exc.strerror or str(exc))
    return UnsafeFile(f"{what}: {reason}", missing=exc.errno == errno.ENOENT)
