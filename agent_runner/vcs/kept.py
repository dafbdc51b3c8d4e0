"""`refs/agent-runner/rounds/<n>`: every piece of work the supervisor secured, kept where
`git stash clear`, a reset or garbage collection cannot take it.

Each ref names an annotated tag whose message is the round's record as JSON (round, action,
exit cause, time, files, size) and whose object is the stash or commit. A ref is created
only where none exists, so nothing is ever overwritten, and removed only by `prune_kept`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from agent_runner.errors import GitError
from agent_runner.vcs.repo import Repo
from agent_runner.vcs.run import IDENTITY_EMAIL, IDENTITY_NAME

PREFIX = "refs/agent-runner/rounds/"
_TRIES = 100  # round numbers repeat only after state.json is lost: a suffix tells them apart


@dataclass(frozen=True)
class Kept:
    """One kept ref: the tag it names, the work the tag points at, and the record in it."""

    ref: str
    tag: str
    sha: str
    created: int  # epoch seconds, the tag's own date
    record: dict[str, Any]


def keep_work(repo: Repo, round_no: int, sha: str, record: dict[str, Any], now: float) -> str:
    """Keep commit `sha` under `refs/agent-runner/rounds/<round_no>`; the ref made."""
    message = json.dumps({"round": round_no, **record}, sort_keys=True, ensure_ascii=False)
    tag = _hex(
        repo.git(
            "mktag",
            input=(
                f"object {sha}\ntype commit\ntag agent-runner-round-{round_no}\n"
                f"tagger {IDENTITY_NAME} <{IDENTITY_EMAIL}> {int(now)} +0000\n\n{message}\n"
            ).encode("utf-8", "surrogateescape"),
        )
    )
    for attempt in range(_TRIES):
        ref = f"{PREFIX}{round_no}" + (f"-{attempt}" if attempt else "")
        if repo.resolve(ref) is not None:
            continue
        # An empty old value: update-ref refuses if the ref appeared meanwhile.
        repo.git("update-ref", "--no-deref", ref, tag, "")
        return ref
    raise GitError(f"{PREFIX}{round_no} and {_TRIES - 1} suffixed refs exist already")


def list_kept(repo: Repo) -> list[Kept]:
    """Every kept ref, oldest round first; refs that are not agent-runner's tags are skipped."""
    fields = (
        *("refname", "objecttype", "objectname", "*objectname", "*objecttype"),
        *("taggerdate:unix", "contents"),
    )
    out = repo.git(
        "for-each-ref", "--format=" + "%00".join(f"%({f})" for f in fields) + "%00", PREFIX
    )
    parts = out.split(b"\0")
    kept = []
    for i in range(0, len(parts) - len(fields), len(fields)):
        ref, kind, tag, target, target_kind, date, contents = (
            os.fsdecode(p.strip(b"\n")) for p in parts[i : i + len(fields)]
        )
        record = _record(contents)
        if kind != "tag" or target_kind != "commit" or record is None or not date.isdigit():
            continue
        kept.append(Kept(ref, tag, target, int(date), record))
    return sorted(kept, key=lambda k: (_round_of(k), k.ref))


def prune_kept(repo: Repo, *, older_than: float) -> list[str]:
    """Remove the kept refs made before `older_than` (epoch seconds); the refs removed."""
    removed = []
    for kept in list_kept(repo):
        if kept.created < older_than:
            # With the old value given, a ref changed meanwhile is left alone.
            repo.git("update-ref", "--no-deref", "-d", kept.ref, kept.tag)
            removed.append(kept.ref)
    return removed


def _record(contents: str) -> dict[str, Any] | None:
    try:
        record = json.loads(contents)
    except ValueError:
        return None
    return record if isinstance(record, dict) and type(record.get("round")) is int else None


def _round_of(kept: Kept) -> int:
    return int(kept.record["round"])


def _hex(out: bytes) -> str:
    return out.decode("ascii").strip()
