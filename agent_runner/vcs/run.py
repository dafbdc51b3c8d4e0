"""How git is run: fixed `-c` overrides, a scrubbed environment, every configured filter driver
switched off, and a timeout that kills git's whole group. Every git call starts here.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
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
# Quick reads that run every round. They alone may outlive a killed serve (finishing within
# milliseconds, changing nothing): a death signal costs each git a full fork instead of vfork.
# Every other git dies with serve, and the next serve kills anything left by its marker.
_OUTLIVE_SERVE = frozenset({"config", "rev-parse", "status", "check-ignore", "ls-files"})
PR_SET_PDEATHSIG = 1
_FILTER_KEYS = ("clean", "smudge", "process")
_MAX_ERROR_CHARS = 300


class GitTimedOut(GitError):
    """git ran past its time limit and was killed with its whole process group."""


@dataclass(frozen=True)
class GitResult:
    """A finished git command: exit status and both outputs, undecoded."""

    returncode: int
    stdout: bytes
    stderr: bytes


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
    dies_with_us = _subcommand(args) not in _OUTLIVE_SERVE
    try:
        return subprocess.Popen(
            ["git", *HARDENING_ARGS, *args],
            cwd=work_dir,
            env=full_env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # so a timeout can kill git's own children too
            # The only thing it does is one prctl: no lock another thread could hold.
            preexec_fn=_die_with(os.getpid()) if dies_with_us else None,  # noqa: PLW1509
        )
    except OSError as exc:
        raise GitError(f"cannot run git in {work_dir}: {exc.strerror or exc}") from exc


def _die_with(parent: int) -> Callable[[], None]:
    """A preexec_fn: SIGKILL for the child the moment `parent` dies (PR_SET_PDEATHSIG)."""
    prctl = _libc().prctl

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)  # the parent died before the signal was armed: it cannot fire now

    return arm


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _finish(
    proc: subprocess.Popen[bytes], args: Sequence[str], input: bytes | None, timeout_s: float
) -> GitResult:
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise GitTimedOut(f"git {_subcommand(args)} timed out after {timeout_s:g}s") from None
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
