"""A read-only descriptor changes nothing: ioctl and fcntl pass only the requests a hook needs.

The target file is owned by the uid plugin code runs as (a work tree under a user's
supervisor is), so without the filter the owner's rights would let each request through.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runner.plugins.child.syscalls import FCNTL_ALLOWED, IOCTL_ALLOWED
from tests.security.conftest import run_hook
from tests.security.harness import InProcess

EPERM = 1

# request name -> (number, argument buffer size): what each would do to a file it can only read.
REFUSED_IOCTLS = {
    "FS_IOC_SETFLAGS": (0x40086602, 8),  # nodump, sync, noatime on work-tree files
    "FS_IOC_SETVERSION": (0x40087602, 8),  # rewrite the inode generation
    "FS_IOC_FSSETXATTR": (0x401C5820, 28),  # project id, extent size hints
    "FS_IOC_ENABLE_VERITY": (0x40806685, 128),  # make the file immutable for good
    "FS_IOC_ADD_ENCRYPTION_KEY": (0xC0506617, 80),  # keys that outlive the call
    "FS_IOC_SET_ENCRYPTION_POLICY": (0x800C6613, 12),
    "FICLONE": (0x40049409, 0),  # share extents with another file
    "TIOCSTI": (0x5412, 1),  # type into a terminal
    "FIOASYNC": (0x5452, 4),  # SIGIO on readiness: a signal it chose
    "FIOSETOWN": (0x8901, 4),
    "SIOCSPGRP": (0x8902, 4),
}
# command name -> (number, argument): leases, notification, owners and signals.
REFUSED_FCNTLS = {
    "F_SETLEASE": (1024, 0),  # F_RDLCK: stalls another process opening the file for write
    "F_GETLEASE": (1025, 0),
    "F_NOTIFY": (1026, 0x80000001),  # DN_ACCESS | DN_MULTISHOT
    "F_SETOWN": (8, 0),
    "F_GETOWN": (9, 0),
    "F_SETSIG": (10, 31),  # SIGSYS on I/O: a forged seccomp kill
    "F_GETSIG": (11, 0),
    "F_SETOWN_EX": (15, 0),
    "F_SET_RW_HINT": (1036, 0),
    "F_SETPIPE_SZ": (1031, 1 << 20),
}

REQUEST = """
import fcntl as _fcntl
def hook(view):
    fd = os.open(view.target, os.O_RDONLY)
    if view.kind == "ioctl":
        buf = ctypes.create_string_buffer(max(view.size, 8))
        rc = libc.ioctl(fd, ctypes.c_ulong(view.number), buf)
    else:
        rc = libc.fcntl(fd, view.number, ctypes.c_long(view.argument))
    err = ctypes.get_errno() if rc == -1 else 0
    return SpawnDecision.skip(f"{rc} {err}")
"""


def _target(shared_dir: Path, confined: InProcess) -> Path:
    target = shared_dir / "tracked.py"
    target.write_text("print('work tree file')\n")
    __import__("os").chown(target, confined.child_uid, confined.child_uid)
    return target


@pytest.mark.parametrize("name", sorted(REFUSED_IOCTLS))
def test_ioctl_request_is_refused(confined: InProcess, shared_dir: Path, name: str) -> None:
    number, size = REFUSED_IOCTLS[name]
    view = {"kind": "ioctl", "number": number, "size": size, "target": str(shared_dir)}
    if name.startswith("FS_IOC_S") or name in ("FICLONE", "FS_IOC_ENABLE_VERITY"):
        view["target"] = str(_target(shared_dir, confined))
    result = run_hook(confined, REQUEST, view=view, read_roots=(shared_dir,))
    assert result.status == "ok", result
    assert result.value["reason"] == f"-1 {EPERM}", name


@pytest.mark.parametrize("name", sorted(REFUSED_FCNTLS))
def test_fcntl_command_is_refused(confined: InProcess, shared_dir: Path, name: str) -> None:
    number, argument = REFUSED_FCNTLS[name]
    target = shared_dir if name == "F_NOTIFY" else _target(shared_dir, confined)
    view = {"kind": "fcntl", "number": number, "argument": argument, "target": str(target)}
    result = run_hook(confined, REQUEST, view=view, read_roots=(shared_dir,))
    assert result.status == "ok", result
    assert result.value["reason"] == f"-1 {EPERM}", name


def test_the_flags_of_a_work_tree_file_are_unchanged(confined: InProcess, shared_dir: Path) -> None:
    target = _target(shared_dir, confined)
    before = target.stat()
    body = """
    import fcntl as _fcntl, struct
    def hook(view):
        fd = os.open(view.target, os.O_RDONLY)
        for request in (0x40086602, 0x40087602):
            try:
                _fcntl.ioctl(fd, request, struct.pack("l", 0x40))  # FS_NODUMP_FL
            except OSError:
                pass
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body, view={"target": str(target)}, read_roots=(shared_dir,))
    assert result.status == "ok", result
    after = target.stat()
    assert (after.st_mtime_ns, after.st_ctime_ns) == (before.st_mtime_ns, before.st_ctime_ns)


# What a hook's interpreter needs, each on a descriptor it really has.
ALLOWED = """
import fcntl as _fcntl
def hook(view):
    out = []
    path = os.path.join(os.environ["TMPDIR"], "f")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    for name, call in (
        ("TCGETS", lambda: open(path).isatty()),
        ("TIOCGWINSZ", lambda: os.get_terminal_size(1)),
        ("FIONREAD", lambda: _fcntl.ioctl(0, 0x541B, b"    ")),
        ("FIOCLEX", lambda: os.set_inheritable(fd, False)),
        ("FIONCLEX", lambda: os.set_inheritable(fd, True)),
        ("FIONBIO", lambda: os.set_blocking(fd, False)),
        ("F_GETFL", lambda: os.get_blocking(fd)),
        ("F_SETFL", lambda: _fcntl.fcntl(fd, _fcntl.F_SETFL, os.O_APPEND)),
        ("F_DUPFD_CLOEXEC", lambda: os.close(os.dup(fd))),
        ("F_SETLK", lambda: _fcntl.lockf(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)),
    ):
        try:
            call()
            out.append(f"{name}=ok")
        except OSError as exc:
            out.append(f"{name}={exc.errno}")
    return SpawnDecision.skip(" ".join(out))
"""


def test_the_requests_a_hook_needs_still_work(confined: InProcess) -> None:
    result = run_hook(confined, ALLOWED)
    assert result.status == "ok", result
    outcomes = dict(item.split("=") for item in result.value["reason"].split())
    # Not a terminal: the kernel answers ENOTTY (25), which is how isatty() says no.
    assert outcomes.pop("TIOCGWINSZ") == "25"
    assert set(outcomes.values()) == {"ok"}, result.value["reason"]
    assert set(IOCTL_ALLOWED) == {
        "TCGETS",
        "TIOCGWINSZ",
        "FIONREAD",
        "FIONBIO",
        "FIOCLEX",
        "FIONCLEX",
    }
    assert {"F_GETFL", "F_SETFL", "F_DUPFD_CLOEXEC", "F_SETLK"} <= set(FCNTL_ALLOWED)
