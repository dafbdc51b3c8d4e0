"""Where the agent's executable is, and why exec would refuse it: PATH, work_dir, the #! line.

Searched exactly as the spawn searches: a name without a slash on the agent's PATH, a path
with one against work_dir (the agent's cwd).
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_SHEBANG_BYTES = 256  # the kernel reads at most this much of a #! line (BINPRM_BUF_SIZE)


@dataclass(frozen=True)
class Program:
    """The agent's executable as found, or why it cannot be started (`problem` set)."""

    path: Path | None
    problem: str | None


def find_program(  # noqa: PLR0911 -- one return per reason exec would give
    program: str, *, work_dir: Path, search_path: str | None, cwd_name: str = "work_dir"
) -> Program:
    """The executable `program` names, and the first reason exec would fail on it.

    `work_dir` is the cwd the program starts in (`cwd_name` says what it is, for messages).
    """
    if "/" not in program:
        found = shutil.which(program, path=search_path)
        if found is None:
            return Program(None, f"{program!r} is not an executable on PATH")
        return Program(Path(found), interpreter_problem(Path(found), search_path))
    # A relative path is resolved by exec against the program's cwd.
    path = work_dir / program
    shown = program if Path(program).is_absolute() else f"{program!r} (in {cwd_name}: {path})"
    try:
        info = path.stat()
    except FileNotFoundError:
        return Program(None, f"{shown} does not exist")
    except OSError as exc:
        return Program(None, f"{shown} cannot be read: {exc.strerror}")
    if not stat.S_ISREG(info.st_mode):
        return Program(None, f"{shown} is not a file")
    if not os.access(path, os.X_OK):
        return Program(None, f"{shown} is not executable (chmod +x it)")
    return Program(path, interpreter_problem(path, search_path))


def interpreter_problem(path: Path, search_path: str | None) -> str | None:
    """Why the interpreter a script's #! line names cannot run it, or None (also for a binary)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(MAX_SHEBANG_BYTES)
    except OSError:
        return None  # exec has the last word on what it cannot read
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return f"{path}: the #! line names no interpreter"
    interpreter = words[0]
    if not os.access(interpreter, os.X_OK) or not os.path.isfile(interpreter):
        return f"{path}: its #! interpreter {interpreter} does not exist or is not executable"
    # `#!/usr/bin/env NAME`: env searches the agent's PATH, as it will when the round starts.
    through_env = os.path.basename(interpreter) == "env" and len(words) == 2
    if (
        through_env
        and not words[1].startswith("-")
        and not shutil.which(words[1], path=search_path)
    ):
        return f"{path}: its #! line runs {words[1]!r} through env, and it is not on PATH"
    return None
