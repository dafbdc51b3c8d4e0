"""Every git call the supervisor makes, hardened against repository-controlled programs.

All of them go through `run_git`: fixed `-c` overrides, a scrubbed environment, every
filter driver the configuration defines switched off, a timeout that kills git's whole group.
`open_repo` acts only on the repository that lives under the work dir, never one it points at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent_runner.errors import GitError

GIT_TIMEOUT_S = 60.0
IDENTITY_NAME = "agent-runner"
IDENTITY_EMAIL = "agent-runner@localhost"

# Each of these names a program git would otherwise run from repository config.
HARDENING_ARGS: tuple[str, ...] = (
    "--no-pager",
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.pager=cat",
    "-c", "core.editor=false",
    "-c", "core.sshCommand=false",
    "-c", "credential.helper=",
    "-c", "protocol.allow=never",
    "-c", "commit.gpgSign=false",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    # A submodule is another repository with its own config (filters, fsmonitor): never entered.
    "-c", "diff.ignoreSubmodules=all",
    "-c", "submodule.recurse=false",
)  # fmt: skip

HARDENED_ENV: Mapping[str, str] = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": "false",
    "GIT_SEQUENCE_EDITOR": "false",
    "LC_ALL": "C",
    "GIT_AUTHOR_NAME": IDENTITY_NAME,
    "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
    "GIT_COMMITTER_NAME": IDENTITY_NAME,
    "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
}

# Subcommands that never read work-tree files, so never reach a filter driver. Not write-tree:
# it re-reads racily clean files, through their clean filter.
_FILTER_FREE = frozenset({"config", "rev-parse", "ls-tree", "update-ref"})
_FILTER_KEYS = ("clean", "smudge", "process")
_FALSE_VALUES = frozenset({"false", "no", "off", "0", ""})
_GITLINK_MODE = b"160000"
_MAX_ERROR_CHARS = 300
_OPERATIONS = (
    ("MERGE_HEAD", "merge"),
    ("rebase-merge", "rebase"),
    ("rebase-apply", "rebase"),
    ("CHERRY_PICK_HEAD", "cherry-pick"),
    ("REVERT_HEAD", "revert"),
)


@dataclass(frozen=True)
class GitResult:
    """A finished git command: exit status and both outputs, undecoded."""

    returncode: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class StatusEntry:
    """One `git status --porcelain=v1` record; `path` is fs-decoded and relative to the top."""

    xy: str
    path: str


@dataclass(frozen=True)
class TreeEntry:
    """One blob, link or gitlink in a tree: mode and object id."""

    mode: str
    oid: str


def run_git(
    work_dir: Path,
    *args: str,
    timeout_s: float = GIT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    overrides: Sequence[tuple[str, str]] | None = None,
) -> bytes:
    """Run hardened git in `work_dir` and return its stdout; raise GitError unless it exits 0.

    `overrides` are the filter-driver overrides from `filter_overrides`; None looks them up.
    """
    result = _run(work_dir, args, timeout_s=timeout_s, env=env, input=input, overrides=overrides)
    if result.returncode != 0:
        raise GitError(_failure(args, result))
    return result.stdout


def _run(
    work_dir: Path,
    args: Sequence[str],
    *,
    timeout_s: float = GIT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    overrides: Sequence[tuple[str, str]] | None = None,
) -> GitResult:
    proc = _start(work_dir, args, env=env, stdin=input is not None, overrides=overrides)
    return _finish(proc, args, input, timeout_s)


def _start(
    work_dir: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: bool = False,
    overrides: Sequence[tuple[str, str]] | None = None,
) -> subprocess.Popen[bytes]:
    full_env = _base_env(env or {})
    if _subcommand(args) not in _FILTER_FREE:
        if overrides is None:
            overrides = filter_overrides(work_dir)
        _add_config(full_env, overrides)
    try:
        return subprocess.Popen(
            ["git", *HARDENING_ARGS, *args],
            cwd=work_dir,
            env=full_env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # so a timeout can kill git's own children too
        )
    except OSError as exc:
        raise GitError(f"cannot run git in {work_dir}: {exc.strerror or exc}") from exc


def _finish(
    proc: subprocess.Popen[bytes], args: Sequence[str], input: bytes | None, timeout_s: float
) -> GitResult:
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise GitError(f"git {_subcommand(args)} timed out after {timeout_s:g}s") from None
    return GitResult(proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone: nothing left to kill
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _base_env(extra: Mapping[str, str]) -> dict[str, str]:
    # Inherited GIT_* variables could redirect git (GIT_DIR, GIT_CONFIG_PARAMETERS,
    # GIT_EXTERNAL_DIFF, GIT_SSH_COMMAND...): none of them reach the supervisor's git.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(extra)
    env.update(HARDENED_ENV)  # a caller adds variables (GIT_INDEX_FILE) but cannot undo these
    return env


def _add_config(env: dict[str, str], pairs: Sequence[tuple[str, str]]) -> None:
    # GIT_CONFIG_KEY_n keeps key and value apart, so a driver name holding "=" cannot
    # split a `-c key=value` argument and escape its override.
    base = int(env.get("GIT_CONFIG_COUNT", "0"))
    for i, (key, value) in enumerate(pairs, start=base):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_CONFIG_COUNT"] = str(base + len(pairs))


def filter_overrides(work_dir: Path) -> list[tuple[str, str]]:
    """Config pairs emptying every `filter.<driver>.clean|smudge|process` defined, unrequired."""
    return _overrides_for(_config_entries(work_dir, r"^filter\."))


def _config_entries(work_dir: Path, pattern: str) -> list[tuple[str, str | None]]:
    """Every (key, value) in effect whose key matches `pattern`; None is a key with no value."""
    result = _run(work_dir, ["config", "--null", "--get-regexp", pattern])
    if result.returncode == 1:  # no key matched
        return []
    if result.returncode != 0:
        raise GitError(_failure(["config"], result))
    entries: list[tuple[str, str | None]] = []
    for raw in result.stdout.split(b"\0"):
        if raw:
            key, newline, value = raw.partition(b"\n")
            entries.append((os.fsdecode(key), os.fsdecode(value) if newline else None))
    return entries


def _overrides_for(entries: Iterable[tuple[str, str | None]]) -> list[tuple[str, str]]:
    # In-repo .gitattributes cannot be switched off (no GIT_ATTR_SOURCE before git 2.40), but a
    # filter only runs when config names its program: so every configured driver is emptied.
    pairs: list[tuple[str, str]] = []
    drivers: set[str] = set()
    for key, _value in entries:
        section, _, rest = key.partition(".")
        driver, _, name = rest.rpartition(".")
        if section != "filter" or not driver:
            continue
        drivers.add(driver)
        if name in _FILTER_KEYS:
            pairs.append((key, ""))
    pairs.extend((f"filter.{d}.required", "false") for d in sorted(drivers))
    return pairs


def _subcommand(args: Sequence[str]) -> str:
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-c", "-C"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return ""


def _failure(args: Sequence[str], result: GitResult) -> str:
    text = f"git {_subcommand(args)} failed (exit {result.returncode}): {_detail(result)}"
    return text[:_MAX_ERROR_CHARS]


def _detail(result: GitResult) -> str:
    stderr = os.fsdecode(result.stderr).splitlines()
    lines = [ln.strip() for ln in stderr if ln.strip() and not ln.startswith("hint:")]
    fatal = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
    return (fatal or lines or ["no message"])[-1]


@dataclass(frozen=True)
class Repo:
    """A work tree opened once: its top, its git directory, HEAD and the filter overrides."""

    top: Path
    git_dir: Path
    head: str | None
    overrides: tuple[tuple[str, str], ...]

    def git(
        self, *args: str, env: Mapping[str, str] | None = None, input: bytes | None = None
    ) -> bytes:
        """`run_git` at the top of this work tree, reusing its filter overrides."""
        return run_git(self.top, *args, env=self._env(env), input=input, overrides=self.overrides)

    def resolve(self, rev: str) -> str | None:
        """The object id `rev` names in this repository, or None when it names nothing."""
        args = ["rev-parse", "-q", "--verify", "--end-of-options", rev]
        result = _run(self.top, args, env=self._env(None), overrides=self.overrides)
        return result.stdout.decode("ascii").strip() if result.returncode == 0 else None

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        # Named explicitly, so no later call rediscovers the repository or reads core.worktree.
        return {"GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.top), **(extra or {})}


def open_repo(work_dir: Path) -> Repo:
    """Open the repository under `work_dir`; GitError if none, or if git would act elsewhere."""
    if not work_dir.is_dir():
        raise GitError(f"{work_dir} is not a directory")
    args = [
        "rev-parse",
        "--path-format=absolute",
        "--show-toplevel",
        "--absolute-git-dir",
        "--git-common-dir",
        "-q",
        "--verify",
        "HEAD^{commit}",
    ]
    # Both run at once: this sits between two rounds, on the restart-latency path.
    locating = _start(work_dir, args)
    try:
        entries = _config_entries(work_dir, r"^(filter\.|core\.(worktree|bare)$)")
    finally:
        result = _finish(locating, args, None, GIT_TIMEOUT_S)
    problem, bare = _layout_settings(entries)
    lines = result.stdout.split(b"\n")
    # Exit 1 with the paths printed is an unborn HEAD; anything else is no work tree at all.
    if problem is None and (result.returncode not in (0, 1) or len(lines) < 4 or not lines[0]):
        # git's own words matter here: "dubious ownership" needs a different fix than no repo.
        problem = bare or f"{work_dir} is not inside a git work tree: {_detail(result)}"
    if problem is None:
        top, git_dir, common = (Path(os.fsdecode(line)) for line in lines[:3])
        problem = _layout_problem(work_dir, top, git_dir, common)
        # A bare repository's linked worktrees are ordinary work trees: git ignores core.bare there.
        if problem is None and bare and not (top / ".git").is_file():
            problem = bare
    if problem is not None:
        raise GitError(problem[:_MAX_ERROR_CHARS])
    head = lines[3].decode("ascii") if result.returncode == 0 else None
    return Repo(top, git_dir, head or None, tuple(_overrides_for(entries)))


def _layout_settings(entries: Iterable[tuple[str, str | None]]) -> tuple[str | None, str | None]:
    """Why core.worktree refuses the repository, and why core.bare would (None: it does not)."""
    worktree = bare = None
    for key, value in entries:
        if key == "core.worktree":
            worktree = f"core.worktree is set (to {value}): git would act on another directory"
        if key == "core.bare" and (value is None or value.lower() not in _FALSE_VALUES):
            bare = "core.bare is true: git sees a repository without a work tree"
    return worktree, bare


def _layout_problem(work_dir: Path, top: Path, git_dir: Path, common: Path) -> str | None:
    """Why git, started in `work_dir`, would act on something other than the repository there."""
    real = work_dir.resolve()
    if real != top and top not in real.parents:
        return f"git reports the work tree {top}, which does not hold {work_dir}"
    for folder in (real, *real.parents):
        if folder == top:
            break
        if os.path.lexists(folder / ".git"):
            # git walked past it to an outer repository: acting there would take another's work.
            return f"{folder / '.git'} is there but git does not recognise it as a repository"
    dot_git = top / ".git"
    own = dot_git.is_dir() and git_dir == dot_git and common == dot_git
    linked = dot_git.is_file() and _is_linked_worktree(dot_git, git_dir, common)
    if (own or linked) and not dot_git.is_symlink():
        return None
    return (
        f"git would use {git_dir}, not the repository in {dot_git} (a `gitdir:` file, "
        "`commondir` or symlink points elsewhere)"
    )


def _is_linked_worktree(dot_git: Path, git_dir: Path, common: Path) -> bool:
    # `git worktree add` registers the work tree in the main repository, and that registration
    # points back at this `.git` file: a gitdir file alone cannot forge the way back.
    if git_dir.parent != common / "worktrees":
        return False
    try:
        back = (git_dir / "gitdir").read_bytes().strip()
    except OSError:
        return False
    return Path(os.fsdecode(back)).resolve() == dot_git


def is_work_tree(work_dir: Path) -> bool:
    """True when `work_dir` is inside a git work tree."""
    if not work_dir.is_dir():
        return False
    result = _run(work_dir, ["rev-parse", "--is-inside-work-tree"])
    return result.returncode == 0 and result.stdout.strip() == b"true"


def head_sha(work_dir: Path) -> str | None:
    """The commit HEAD points at, or None when the repository has no commits yet."""
    return resolve(work_dir, "HEAD^{commit}")


def resolve(work_dir: Path, rev: str) -> str | None:
    """The object id `rev` names, or None when it names nothing."""
    result = _run(work_dir, ["rev-parse", "-q", "--verify", "--end-of-options", rev])
    if result.returncode != 0:
        return None
    return result.stdout.decode("ascii").strip()


def status(repo: Repo) -> tuple[StatusEntry, ...]:
    """Changed and untracked (not ignored) files, one entry per path, renames split in two."""
    out = repo.git(
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
        "--ignored=no",
        "--ignore-submodules=all",
    )
    entries = []
    for record in out.split(b"\0"):
        if len(record) > 3:
            entries.append(StatusEntry(record[:2].decode("ascii"), os.fsdecode(record[3:])))
    return tuple(entries)


def operation_in_progress(repo: Repo) -> str | None:
    """`merge`, `rebase`, `cherry-pick` or `revert` when one was left half-done, else None."""
    for name, operation in _OPERATIONS:
        if (repo.git_dir / name).exists():
            return operation
    return None


def submodule_paths(repo: Repo) -> tuple[str, ...]:
    """Paths of the submodules (gitlinks) in the index."""
    out = repo.git("ls-files", "-z", "--stage")
    paths = []
    for record in out.split(b"\0"):
        if record.startswith(_GITLINK_MODE + b" "):
            paths.append(os.fsdecode(record.partition(b"\t")[2]))
    return tuple(paths)


def filtered_paths(repo: Repo, paths: Sequence[str]) -> dict[str, str]:
    """Each of `paths` that .gitattributes puts under a filter, with the filter's name."""
    found = _filter_attributes(repo, paths, {})
    if repo.head is not None and any(p.rpartition("/")[2] == ".gitattributes" for p in paths):
        # A stash puts HEAD's .gitattributes back: what HEAD says about a file counts too.
        with tempfile.TemporaryDirectory(dir=repo.git_dir, prefix="agent-runner-attr-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            repo.git("read-tree", repo.head, env=env)
            found = {**_filter_attributes(repo, paths, env, "--cached"), **found}
    return found


def _filter_attributes(
    repo: Repo, paths: Sequence[str], env: Mapping[str, str], *mode: str
) -> dict[str, str]:
    out = repo.git(
        "check-attr", *mode, "-z", "--stdin", "filter", env=env, input=_pathspec_input(paths)
    )
    fields = out.split(b"\0")
    found = {}
    for i in range(0, len(fields) - 2, 3):
        value = os.fsdecode(fields[i + 2])
        if value not in ("unspecified", "unset"):
            found[os.fsdecode(fields[i])] = value
    return found


def literal_pathspecs(paths: Iterable[str]) -> list[str]:
    """Pathspecs matching exactly these paths, whatever characters they hold."""
    return [f":(literal){p}" for p in paths]


def all_but(excluded: Iterable[str]) -> list[str]:
    """Pathspecs matching the whole tree except `excluded` (files or folders)."""
    return [".", *(f":(exclude,literal){p}" for p in excluded)]


def _pathspec_input(pathspecs: Sequence[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in pathspecs)


_PATHSPEC_STDIN = ("--pathspec-from-file=-", "--pathspec-file-nul")


def snapshot_tree(repo: Repo, pathspecs: Sequence[str]) -> str:
    """Tree id of the work tree as `git add -A` would stage it, built in a throwaway index."""
    # The throwaway index lives in the git dir: anywhere in the work tree it would snapshot itself.
    with tempfile.TemporaryDirectory(dir=repo.git_dir, prefix="agent-runner-snapshot-") as tmp:
        index = Path(tmp) / "index"
        real_index = repo.git_dir / "index"
        if real_index.exists():
            # Starting from the real index reuses its stat data: unchanged files are not rehashed.
            shutil.copyfile(real_index, index)
        env = {"GIT_INDEX_FILE": str(index)}
        repo.git("add", "-A", *_PATHSPEC_STDIN, env=env, input=_pathspec_input(pathspecs))
        return repo.git("write-tree", env=env).decode("ascii").strip()


def stash_push(repo: Repo, message: str, pathspecs: Sequence[str]) -> str | None:
    """Stash matching changes, untracked files included; the new stash's SHA, or None if none."""
    before = repo.resolve("refs/stash")
    out = repo.git(
        "stash",
        "push",
        "--include-untracked",
        "--message",
        message,
        *_PATHSPEC_STDIN,
        input=_pathspec_input(pathspecs),
    )
    after = repo.resolve("refs/stash")
    # Identical work, message and second make an identical stash commit: the SHA alone
    # cannot tell "saved again" from "nothing to save", git's own report can (LC_ALL=C).
    saved = after != before or out.startswith(b"Saved working directory")
    return after if saved else None


def commit(repo: Repo, message: str, pathspecs: Sequence[str]) -> str:
    """Commit exactly the matching paths as they are on disk; the new HEAD."""
    spec = _pathspec_input(pathspecs)
    repo.git("add", "-A", *_PATHSPEC_STDIN, input=spec)
    repo.git(
        "commit",
        "--no-verify",
        "--no-gpg-sign",
        "--cleanup=verbatim",
        "--message",
        message,
        "--only",
        *_PATHSPEC_STDIN,
        input=spec,
    )
    sha = repo.resolve("HEAD^{commit}")
    if sha is None:
        raise GitError("git commit reported success but HEAD names no commit")
    return sha


def tree_entries(repo: Repo, treeish: str) -> dict[str, TreeEntry]:
    """Every path under `treeish` with its mode and object id."""
    out = repo.git("ls-tree", "-r", "-z", "--full-tree", "--end-of-options", treeish)
    entries = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, oid = meta.decode("ascii").split(" ")
        entries[os.fsdecode(path)] = TreeEntry(mode, oid)
    return entries


def index_lock_holders(lock: Path) -> list[int]:
    """Pids of processes with `lock` open, as far as /proc lets this user see."""
    holders = []
    target = os.path.realpath(lock)  # /proc shows the resolved path
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue  # another user's process, or already gone
        for fd in fds:
            try:
                if os.readlink(fd) == target:
                    holders.append(int(pid_dir.name))
                    break
            except OSError:
                continue
    return holders
