"""The agent's confinement for one serve: its Landlock ruleset, built once at boot, and each
round's TMPDIR, made before the agent starts and removed once every writer of it is gone.

Rules name inodes: a folder the ruleset allows is the one that existed at boot, whatever is
later moved to its path. The supervisor never follows a symlink the agent could have planted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from agent_runner.config import Config
from agent_runner.errors import ConfigError
from agent_runner.events import Emit
from agent_runner.supervisor.agent import landlock
from agent_runner.supervisor.agent.gate import Confine
from agent_runner.supervisor.agent.writepolicy import (
    granted_rights,
    round_tmpdir,
    tmp_root,
    verdict,
    write_rules,
)

FOLDER_MODE = 0o700


@dataclass(frozen=True)
class RoundConfinement:
    """What one round's agent gets: its TMPDIR, and the ruleset it restricts itself with."""

    tmpdir: Path
    landlock: Confine | None  # None: unconfined ("workdir-if-available" without Landlock)
    landlock_abi: int | None


class AgentConfinement:
    """The ruleset and the TMPDIR folder of one serve; `close` releases both."""

    def __init__(self, log_dir: Path, ruleset: int | None, abi: int, emit: Emit) -> None:
        self._log_dir = log_dir
        self._ruleset = ruleset
        self._abi = abi
        self._emit = emit

    @classmethod
    def prepare(cls, config: Config, emit: Emit) -> AgentConfinement | None:
        """Build what `[agent] confine` asks for; None when it is "off".

        ConfigError when it is "workdir" and the kernel cannot confine (boot checks say so
        first), or when a rule the kernel refuses leaves the policy unenforceable.
        """
        mode = config.agent.confine
        if mode == "off":
            return None
        abi = landlock.abi_version()
        decided = verdict(mode, abi)
        if decided.action == "refuse":
            raise ConfigError(f'{config.path}: agent.confine: "workdir" but {decided.reason}')
        log_dir = config.runtime.log_dir
        for problem in _empty_folder(tmp_root(log_dir)):
            emit("agent_tmpdir_cleanup_failed", path=str(tmp_root(log_dir)), reason=problem)
        if decided.action == "unconfined":
            emit("agent_confinement_unavailable", requested=mode, reason=decided.reason)
            return cls(log_dir, None, 0, emit)
        ruleset = landlock.create_ruleset(landlock.write_rights(abi))
        try:
            allowed, skipped = _add_rules(ruleset, config, granted_rights(abi))
        except OSError as exc:
            os.close(ruleset)
            raise ConfigError(
                f"{config.path}: agent.confine: cannot confine writes to {exc.filename}: "
                f"{exc.strerror}"
            ) from None
        emit("agent_confinement_prepared", landlock_abi=abi, writable=allowed, skipped=skipped)
        return cls(log_dir, ruleset, abi, emit)

    def enter(self, number: int) -> RoundConfinement:
        """Round `number`'s TMPDIR (empty, ours) and the ruleset to restrict the agent with."""
        tmpdir = round_tmpdir(self._log_dir, number)
        try:
            tmpdir.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            self.leave(number)  # what an earlier round of that number left there
            tmpdir.mkdir(mode=FOLDER_MODE)
        if self._ruleset is None:
            return RoundConfinement(tmpdir, None, None)
        return RoundConfinement(
            tmpdir, Confine(self._ruleset, landlock.restrict_flags(self._abi)), self._abi
        )

    def leave(self, number: int) -> None:
        """Remove round `number`'s TMPDIR: its agent and every descendant are gone."""
        path = round_tmpdir(self._log_dir, number)
        try:
            path.rmdir()  # the agent left it empty: one system call between two rounds
        except FileNotFoundError:
            return
        except OSError:
            pass  # not empty, or not a folder any more: the careful way below
        else:
            return
        problem = _remove_tree(path)
        if problem is not None:
            self._emit("agent_tmpdir_cleanup_failed", path=str(path), reason=problem)

    @property
    def confines(self) -> bool:
        """False under "workdir-if-available" on a kernel without Landlock."""
        return self._ruleset is not None

    def close(self) -> None:
        if self._ruleset is not None:
            os.close(self._ruleset)
            self._ruleset = None


def _add_rules(ruleset: int, config: Config, rights: int) -> tuple[list[str], list[str]]:
    """Add a rule per path; (the paths allowed, "path: why not" for those left out)."""
    allowed, skipped = [], []
    for rule in write_rules(config):
        if rule.create:
            with contextlib.suppress(FileExistsError):
                rule.path.mkdir(mode=FOLDER_MODE, parents=True)
        try:
            landlock.allow_beneath(ruleset, rule.path, rights)
        except FileNotFoundError:
            # A file the CLI would create (~/.claude.json on a first run) stays unwritable:
            # allowing its folder would allow the operator's home.
            skipped.append(f"{rule.path}: does not exist")
        else:
            allowed.append(str(rule.path))
    return allowed, skipped


def _empty_folder(path: Path) -> list[str]:
    """Make `path` a folder of ours and empty it of what an earlier serve left; what stayed."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=FOLDER_MODE, parents=True)
    if path.is_symlink() or not path.is_dir():
        raise ConfigError(f"{path}: not a folder serve may use for the agents' TMPDIRs")
    problems = (_remove_tree(Path(entry.path)) for entry in os.scandir(path))
    return [problem for problem in problems if problem is not None]


def _remove_tree(path: Path) -> str | None:
    """Remove `path` without following a symlink in it; why it could not be, or None.

    Called only once no process of the agent is left. The agent may have left folders
    unreadable (Landlock does not govern chmod): their modes are restored first.
    """
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            _unlock(path)
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{exc.filename or path}: {exc.strerror}"
    return None


def _unlock(top: Path) -> None:
    """Give every folder beneath `top` (symlinks not followed) the mode that lets us empty it."""
    folders = [str(top)]
    while folders:
        folder = folders.pop()
        os.chmod(folder, FOLDER_MODE)  # a folder, checked without following a link
        with os.scandir(folder) as entries:
            folders.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
