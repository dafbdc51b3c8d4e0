"""Landlock for the agent, through its system calls (ctypes, no binding): the ABI, the write
rights each ABI knows, and a ruleset of path rules.

Only rights that change the filesystem are handled. A right a ruleset does not handle stays
allowed, so reading, executing, device ioctls and the network remain what the system allows.
The agent restricts itself with the ruleset in gatekeeper.py, just before exec.
"""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path

# The same numbers on every architecture: Landlock came after the syscall tables were unified.
SYS_CREATE_RULESET, SYS_ADD_RULE = 444, 445
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1

WRITE_FILE = 1 << 1
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2: rename and link across directories
TRUNCATE = 1 << 14  # ABI 3

# Handled and never granted: a device node the agent made in its work tree (root can mknod)
# would open the disk or memory behind it for writing.
DEVICE_NODES = MAKE_CHAR | MAKE_BLOCK
# The only write rights a rule on a file (not a directory) may carry; others make it EINVAL.
FILE_WRITE = WRITE_FILE | TRUNCATE
# Audit: the agent's denials are logged after exec too (ABI 7), where audit is enabled.
RESTRICT_SELF_LOG_NEW_EXEC_ON = 1 << 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # struct landlock_path_beneath_attr is packed: 12 bytes
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def abi_version() -> int:
    """The kernel's Landlock ABI; 0 when it has none (not built in, or disabled at boot)."""
    abi = _libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(int(abi), 0)


def write_rights(abi: int) -> int:
    """Every right that writes, creates, removes or renames that ABI `abi` can handle."""
    rights = (
        WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK
    ) | (MAKE_FIFO | MAKE_BLOCK | MAKE_SYM)
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def restrict_flags(abi: int) -> int:
    """The landlock_restrict_self flags for the agent under ABI `abi`."""
    return RESTRICT_SELF_LOG_NEW_EXEC_ON if abi >= 7 else 0


def create_ruleset(handled: int) -> int:
    """A new ruleset descriptor (close-on-exec) handling the filesystem rights `handled`."""
    attr = ctypes.c_uint64(handled)  # only handled_access_fs: the size says so
    fd = _libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), 0)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    return int(fd)


def allow_beneath(ruleset: int, path: Path, rights: int) -> bool:
    """Let the ruleset allow `rights` beneath `path` (a file: only its file rights).

    True when `path` is a directory. OSError when it cannot be opened or the rule is refused.
    """
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        rule = _PathBeneath(rights if is_dir else rights & FILE_WRITE, fd)
        if _libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)
    return is_dir
