"""Run Python code as an unused non-root uid: the supervisor of a `systemctl --user` operator.

`python -m tests.unprivileged UID MODULE|SCRIPT.py [ARGS...]` (started as root) drops to
`UID` and runs the module or script as `__main__`. The interpreter and the virtualenv may
live where that uid cannot traverse (pyenv under a 0700 /root): in a private mount
namespace, each such directory on the way is covered by an empty 0711 tmpfs holding only
the entry needed below it, so paths stay identical and nothing on the host changes. Then
every uid and gid becomes the unused one, supplementary groups and capabilities go, and no
code runs as root afterwards.
"""

from __future__ import annotations

import ctypes
import grp
import os
import pwd
import runpy
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Far from login uids (1000+) and from 65534; a pid-based start keeps parallel runs apart.
UID_RANGE = range(60_100, 60_900)
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 0x1000, 0x4000, 1 << 18, 0x2, 0x4
PR_CAPBSET_DROP = 24

_libc = ctypes.CDLL(None, use_errno=True)


def _uids_in_use() -> set[int]:
    used = {entry.pw_uid for entry in pwd.getpwall()} | {entry.gr_gid for entry in grp.getgrall()}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for line in (proc / "status").read_text().splitlines():
                if line.startswith(("Uid:", "Gid:")):
                    used.update(int(word) for word in line.split()[1:])
        except OSError:
            continue
    return used


def unused_uid() -> int:
    """A uid, also free as a gid, with no account, group or process on this host right now."""
    used = _uids_in_use()
    start = os.getpid() % len(UID_RANGE)
    for offset in range(len(UID_RANGE)):
        uid = UID_RANGE[(start + offset) % len(UID_RANGE)]
        if uid not in used:
            return uid
    raise RuntimeError(f"no unused uid in {UID_RANGE}")


def command(module: str, *args: str, uid: int | None = None) -> list[str]:
    """The argv that runs `module` as an unused uid (or `uid`); start it as root."""
    chosen = unused_uid() if uid is None else uid
    return [sys.executable, "-m", "tests.unprivileged", str(chosen), module, *args]


def popen(module: str, *args: str) -> subprocess.Popen[bytes]:
    """Start `module` as an unused uid, from the repository root, talking over stdin/stdout."""
    return subprocess.Popen(
        command(module, *args), cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _blocked_step(path: Path) -> tuple[Path, str] | None:
    """The first directory on the way to `path` others cannot traverse, and the next name."""
    parts = path.parts
    for depth in range(1, len(parts)):
        directory = Path(*parts[:depth])
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            return directory, parts[depth]
    return None


def expose(paths: Iterable[Path]) -> None:
    """In a new private mount namespace, make every path in `paths` reachable by any uid."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    wanted = [Path(os.path.realpath(p)) for p in paths if os.path.exists(p)]
    for _ in range(16):
        steps: dict[Path, set[str]] = {}
        for path in wanted:
            step = _blocked_step(path)
            if step is not None:
                steps.setdefault(step[0], set()).add(step[1])
        if not steps:
            return
        for directory, names in steps.items():
            kept = {name: os.open(directory / name, os.O_PATH) for name in names}
            options = b"mode=0711,size=1m"
            _check(
                _libc.mount(b"tmpfs", bytes(directory), b"tmpfs", MS_NOSUID | MS_NODEV, options),
                f"mount tmpfs on {directory}",
            )
            for name, fd in kept.items():
                target = directory / name
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    target.mkdir()
                else:
                    target.touch()
                source = f"/proc/self/fd/{fd}".encode()
                _check(
                    _libc.mount(source, bytes(target), None, MS_BIND | MS_REC, None),
                    f"bind {target}",
                )
                os.close(fd)
    raise RuntimeError(f"could not expose {wanted}")


def become(uid: int) -> None:
    """Switch every uid and gid to `uid`, with no supplementary group and no capability left."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
        raise RuntimeError("the uid switch did not take")


def main(argv: Sequence[str]) -> None:
    """`UID MODULE|SCRIPT.py [ARGS...]`: expose the interpreter and the repository, drop, run."""
    uid, module, *rest = argv
    if os.geteuid() != 0:
        raise SystemExit("tests.unprivileged must be started as root")
    expose(
        [
            Path(sys.executable),
            Path(sys.base_prefix),
            Path(sys.prefix),
            REPO,
            *map(Path, sys.path[1:]),
        ]
    )
    become(int(uid))
    os.environ["HOME"] = "/tmp"
    sys.argv = [module, *rest]
    if module.endswith(".py"):
        runpy.run_path(module, run_name="__main__")
    else:
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
