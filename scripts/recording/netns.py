"""A loopback-only network namespace: the recorded CLIs can reach 127.0.0.1 and nothing else.

`unshare --net` (root) gives a namespace whose only interface is a down `lo`; the child brings
it up and checks that no other interface exists before any CLI starts.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
from pathlib import Path

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def isolation_unavailable() -> str | None:
    """Why a loopback-only namespace cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "recording needs root for `unshare --net` (a loopback-only network namespace)"
    if shutil.which("unshare") is None:
        return "recording needs `unshare` (util-linux) on PATH"
    return None


def in_namespace_argv(argv: list[str]) -> list[str]:
    """`argv` run inside a new, empty network namespace."""
    unshare = shutil.which("unshare")
    assert unshare is not None
    return [unshare, "--net", "--", *argv]


def bring_up_loopback() -> None:
    """Set `lo` up (a new namespace starts with it down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | _IFF_UP, b""))


def assert_loopback_only() -> None:
    """Refuse to go on unless `lo` is the namespace's only interface and no route exists."""
    # /proc/net is per namespace; /sys/class/net shows the namespace sysfs was mounted in.
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    interfaces = sorted(line.split(":", 1)[0].strip() for line in lines)
    if interfaces != ["lo"]:
        raise SystemExit(f"refusing to record: interfaces {interfaces} (expected only lo)")
    routes = Path("/proc/self/net/route").read_text().splitlines()[1:]
    if routes:
        raise SystemExit(f"refusing to record: {len(routes)} IPv4 routes in the namespace")
