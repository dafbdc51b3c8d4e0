"""Who a discovered plugin is, and whether its files are the ones pinned (SPEC §8.3, §8.4).

Fails closed: any doubt about a distribution's files refuses that plugin. The bytes of its
modules are read once, hashed, and kept: those bytes, never the files on disk, are what runs.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from agent_runner.config import NAME_RE
from agent_runner.plugins.admission.discovery import (
    CHUNK_BYTES,
    Candidate,
    Distribution,
    RecordEntry,
    UnsafeFile,
    open_beneath,
)
from agent_runner.plugins.builtin import BUILTINS

OWN_DISTRIBUTION = "agent-runner"
OWN_PACKAGE = "agent_runner"
# What one call's request can carry (base64 grows it by a third; wire caps requests at 16 MiB).
MAX_SOURCE_BYTES = 8 << 20
MAX_FILE_BYTES = 256 << 20
STARTUP_HOOKS = ("sitecustomize", "usercustomize")
# RECORD may name any hashlib algorithm; weak ones prove nothing, shake_* need a length.
RECORD_HASHES = frozenset(hashlib.algorithms_guaranteed) - {"md5", "sha1", "shake_128", "shake_256"}
_MODULE_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", re.ASCII)
_ATTRIBUTE_RE = re.compile(r"[A-Za-z_]\w*", re.ASCII)
# Characters that would make a RECORD path mean something else to `cut -d,` or sha256sum.
_AWKWARD = re.compile(r'[\x00-\x1f\x7f,"\\]')

Provenance = Literal["builtin", "squatter", "third-party"]
PinState = Literal["verified", "mismatch", "unpinned", "refused"]


class Unverified(Exception):
    """A distribution's files do not match its RECORD, or cannot be read safely."""


@dataclass(frozen=True)
class Verified:
    """A distribution whose files matched their RECORD: its digest and its modules' bytes."""

    digest: str
    sources: Mapping[str, bytes] = field(repr=False)


def canonical_name(name: str) -> str:
    """A distribution name compared the way installers compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def running_package() -> Path:
    """The folder of the agent_runner package this process runs (already imported)."""
    import agent_runner  # noqa: PLC0415 - the package itself, not a plugin

    return Path(agent_runner.__file__).resolve().parent


def provenance(candidate: Candidate, package: Path) -> Provenance:
    """Builtin, squatter or third-party; `package` is the agent_runner package now running."""
    if _genuine_builtin(candidate, package):
        return "builtin"
    module = candidate.module
    if candidate.name in BUILTINS or module == OWN_PACKAGE or module.startswith(OWN_PACKAGE + "."):
        return "squatter"
    return "third-party"


def _genuine_builtin(candidate: Candidate, package: Path) -> bool:
    """Declared by agent-runner itself, as the static set says, in the package that is running.

    A regular install must list the module in its RECORD; an editable install has no such
    RECORD, so its direct_url.json must name the folder the running package lives in.
    """
    dist = candidate.dist
    if BUILTINS.get(candidate.name) != candidate.value.strip():
        return False
    if canonical_name(dist.name) != OWN_DISTRIBUTION or dist.problem:
        return False
    relative = candidate.module.replace(".", "/") + ".py"
    if dist.editable_dir is not None:
        root = dist.editable_dir
    elif dist.record is not None and relative in {entry.path for entry in dist.record}:
        root = dist.site
    else:
        return False
    located = Path(os.path.realpath(root / relative))
    builtin_folder = Path(os.path.realpath(package / "plugins" / "builtin"))
    return (
        located == Path(os.path.realpath(package.parent / relative))
        and located.parent == builtin_folder
        and located.is_file()
    )


def refusal(candidate: Candidate) -> str | None:
    """Why a third-party entry is refused before any of its files is read, or None."""
    dist = candidate.dist
    if dist.problem:
        return dist.problem
    if dist.record is None:
        return "the distribution has no RECORD"
    if not NAME_RE.fullmatch(candidate.name):
        return f"{candidate.name!r} is not a valid plugin name (letters, digits, _ . -)"
    value = candidate.value.strip()
    module, colon, attribute = value.partition(":")
    if not _MODULE_RE.fullmatch(module.strip()) or (
        colon and not _ATTRIBUTE_RE.fullmatch(attribute.strip())
    ):
        return f"entry point value {value!r} is not module:attribute"
    return _record_refusal(dist.record) or _module_refusal(candidate, dist.record)


def _record_refusal(record: Sequence[RecordEntry]) -> str | None:
    seen: set[str] = set()
    for entry in record:
        path = entry.path
        problem = _path_problem(path)
        if problem:
            return f"RECORD path {path!r} {problem}"
        if path in seen:
            return f"RECORD lists {path!r} twice"
        seen.add(path)
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".pth"):
            return f"ships a .pth file ({path}), which Python runs at every start"
        if any(part.split(".")[0] in STARTUP_HOOKS for part in path.split("/")):
            return f"ships {path}, which Python runs at every start"
        if path.split("/")[0] == OWN_PACKAGE:
            return f"installs files into agent-runner's own package ({path})"
    return None


def _path_problem(path: str) -> str | None:
    parts = path.split("/")
    if path.startswith("/") or ".." in parts:
        return "escapes the site folder"
    if any(part in ("", ".") for part in parts):
        return "is not in canonical form"
    if _AWKWARD.search(path):
        return "contains a control character, comma, quote or backslash"
    return None


def _module_refusal(candidate: Candidate, record: Sequence[RecordEntry]) -> str | None:
    """The entry's module, and every package above it, must be files of its own distribution."""
    paths = {entry.path for entry in record}
    parts = candidate.module.split(".")
    dist = candidate.dist.name
    base = "/".join(parts)
    if f"{base}.py" not in paths and f"{base}/__init__.py" not in paths:
        return f"module {candidate.module} is not a file of {dist}"
    for depth in range(1, len(parts)):
        package = "/".join(parts[:depth]) + "/__init__.py"
        if package not in paths:
            return f"{package} is not a file of {dist} (namespace packages are not supported)"
    return None


def digest_entries(dist: Distribution) -> list[RecordEntry]:
    """The RECORD entries the digest covers, in digest order (bytewise by path)."""
    assert dist.record is not None
    own_record = f"{dist.info_dir}/RECORD"
    covered = [
        entry
        for entry in dist.record
        if entry.path != own_record
        and not entry.path.endswith(".pyc")
        and "__pycache__" not in entry.path.split("/")[:-1]
    ]
    return sorted(covered, key=lambda entry: entry.path.encode())


def verify(dist: Distribution) -> Verified:
    """Hash every covered file once; check RECORD's hashes; keep the modules' bytes.

    The digest is sha256 over the lines `<sha256 hex>  <path>\\n` (what `sha256sum` prints)
    of every covered file, sorted bytewise by path: see docs/plugins.md for the recipe.
    """
    lines = []
    sources: dict[str, bytes] = {}
    budget = MAX_SOURCE_BYTES
    for entry in digest_entries(dist):
        keep = entry.path.endswith(".py") and not entry.path.startswith(dist.info_dir + "/")
        sha256, data = _hash_file(dist.site, entry, keep, budget)
        if data is not None:
            sources[entry.path] = data
            budget -= len(data)
        lines.append(f"{sha256}  {entry.path}\n")
    return Verified(format_digest(lines), sources)


def format_digest(lines: Iterable[str]) -> str:
    """`sha256:<hex>` of the concatenated sha256sum lines."""
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def _hash_file(site: Path, entry: RecordEntry, keep: bool, budget: int) -> tuple[str, bytes | None]:
    """The file's sha256 (hex) and, when `keep`, its bytes; Unverified on any doubt."""
    listed = None
    if entry.digest is not None:
        algorithm = (entry.algorithm or "").lower()
        if algorithm not in RECORD_HASHES:
            raise Unverified(f"{entry.path}: RECORD uses an unsupported hash {entry.algorithm!r}")
        listed = hashlib.new(algorithm)
    sha256 = hashlib.sha256()
    kept = bytearray() if keep else None
    size = 0
    try:
        fd = open_beneath(site, entry.path)
    except UnsafeFile as exc:
        raise Unverified(str(exc)) from None
    with os.fdopen(fd, "rb") as handle:
        while chunk := _read_chunk(handle, entry.path):
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise Unverified(f"{entry.path}: larger than {MAX_FILE_BYTES} bytes")
            sha256.update(chunk)
            if listed is not None:
                listed.update(chunk)
            if kept is not None:
                kept += chunk
                if len(kept) > budget:
                    raise Unverified(f"its modules exceed {MAX_SOURCE_BYTES} bytes")
    if listed is not None:
        actual = base64.urlsafe_b64encode(listed.digest()).rstrip(b"=").decode()
        if actual != entry.digest:
            raise Unverified(f"{entry.path}: does not match the hash in RECORD")
    if entry.size is not None and entry.size != size:
        raise Unverified(f"{entry.path}: is {size} bytes, RECORD says {entry.size}")
    return sha256.hexdigest(), None if kept is None else bytes(kept)


def _read_chunk(handle: BinaryIO, path: str) -> bytes:
    try:
        return handle.read(CHUNK_BYTES)
    except OSError as exc:
        raise Unverified(f"{path}: {exc.strerror}") from None


@dataclass(frozen=True)
class Assessment:
    """What trust alone says about one entry: provenance, pin state, digest (no plugin code)."""

    candidate: Candidate
    provenance: Provenance
    pin: str | None
    pin_state: PinState | None
    digest: str | None
    reason: str | None
    verified: Verified | None = field(default=None, repr=False)


def assess_all(
    candidates: Sequence[Candidate], pins: Mapping[str, str], package: Path
) -> list[Assessment]:
    """`assess` for every candidate, refusing names that several distributions declare."""
    kinds = [provenance(candidate, package) for candidate in candidates]
    shared = shared_names(candidates, kinds)
    return [
        assess(candidate, pins.get(candidate.name), kind, shared.get(candidate.name, ()))
        for candidate, kind in zip(candidates, kinds, strict=True)
    ]


def shared_names(
    candidates: Sequence[Candidate], kinds: Sequence[Provenance]
) -> dict[str, list[str]]:
    """Names declared by more than one non-builtin entry -> the declaring distributions."""
    declared: dict[str, list[str]] = {}
    for candidate, kind in zip(candidates, kinds, strict=True):
        if kind != "builtin":
            where = f"{candidate.dist.name} in {candidate.dist.site}"
            declared.setdefault(candidate.name, []).append(where)
    return {name: dists for name, dists in declared.items() if len(dists) > 1}


def assess(
    candidate: Candidate, pin: str | None, kind: Provenance, shared_with: Sequence[str] = ()
) -> Assessment:
    """Check one entry's metadata, hash its distribution, compare with its pin."""
    if kind == "builtin":
        return Assessment(candidate, kind, None, None, None, None)
    reason = refusal(candidate)
    if reason is None and shared_with:
        reason = "declared by several distributions: " + "; ".join(shared_with)
    if reason is not None:
        return Assessment(candidate, kind, pin, "refused", None, reason)
    try:
        verified = verify(candidate.dist)
    except Unverified as exc:
        return Assessment(candidate, kind, pin, "mismatch" if pin else "refused", None, str(exc))
    state, reason = compare_pin(pin, verified.digest)
    return Assessment(candidate, kind, pin, state, verified.digest, reason, verified)


def compare_pin(pin: str | None, digest: str) -> tuple[PinState, str | None]:
    """The pin state of a distribution whose files hash to `digest`."""
    if pin is None:
        return "unpinned", None
    if pin == digest:
        return "verified", None
    return "mismatch", "the distribution's files differ from the pin"
