"""The seccomp policy as data, and the BPF it compiles to, evaluated by a small interpreter."""

from __future__ import annotations

import struct

import pytest

from agent_runner.plugins.child import syscalls
from agent_runner.plugins.child.syscalls import (
    AUDIT_ARCH_X86_64,
    FCNTL_ALLOWED,
    IOCTL_ALLOWED,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    child_policy,
    rule_for,
)

POLICY = child_policy()
AUDIT_ARCH_I386 = 0x40000003
KILLED = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "pidfd_getfd",
    "open_by_handle_at",
]
REFUSED = [
    "socket",
    "socketpair",
    "execve",
    "execveat",
    "fork",
    "vfork",
    "clone",
    "memfd_create",
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_send_signal",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "futimesat",
    "utimensat",
]
NEEDED_BY_A_REALISTIC_HOOK = [
    "read",
    "write",
    "openat",
    "close",
    "newfstatat",
    "lseek",
    "getdents64",
    "mmap",
    "munmap",
    "mprotect",
    "madvise",
    "brk",
    "futex",
    "set_robust_list",
    "rseq",
    "rt_sigaction",
    "rt_sigreturn",
    "rt_sigprocmask",
    "getrandom",
    "gettid",
    "getpid",
    "clock_nanosleep",
    "sched_getaffinity",
    "ioctl",
    "fcntl",
    "mkdir",
    "exit",
    "exit_group",
]


def test_every_rule_has_a_unique_name_number_and_a_reason() -> None:
    names = [rule.name for rule in POLICY.rules]
    numbers = [rule.nr for rule in POLICY.rules]
    assert len(names) == len(set(names))
    assert len(numbers) == len(set(numbers))
    assert all(rule.reason for rule in POLICY.rules)
    assert all(0 <= rule.nr <= POLICY.max_nr for rule in POLICY.rules)


def test_default_is_eperm_for_anything_unlisted() -> None:
    assert POLICY.default == "eperm"
    assert rule_for(POLICY, "setuid") is None


@pytest.mark.parametrize("name", KILLED)
def test_escape_syscalls_kill_the_process(name: str) -> None:
    rule = rule_for(POLICY, name)
    assert rule is not None
    assert rule.action == "kill"
    assert rule.when == ()


@pytest.mark.parametrize("name", REFUSED)
def test_forbidden_but_harmless_syscalls_fail_with_eperm(name: str) -> None:
    rule = rule_for(POLICY, name)
    assert rule is not None
    assert rule.action == "eperm"
    assert rule.when == ()


@pytest.mark.parametrize("name", NEEDED_BY_A_REALISTIC_HOOK)
def test_what_a_realistic_hook_uses_is_allowed(name: str) -> None:
    rule = rule_for(POLICY, name)
    assert rule is not None
    assert rule.action == "allow"


def test_clone3_is_enosys_so_libc_falls_back_to_clone() -> None:
    rule = rule_for(POLICY, "clone3")
    assert rule is not None
    assert rule.action == "enosys"


def test_ioctl_and_fcntl_are_allowed_only_for_their_listed_requests() -> None:
    for name, allowed in (("ioctl", IOCTL_ALLOWED), ("fcntl", FCNTL_ALLOWED)):
        rule = rule_for(POLICY, name)
        assert rule is not None
        assert rule.action == "allow"
        assert rule.when == tuple((syscalls.ArgCheck(1, value),) for value in allowed.values())


def test_prlimit64_may_only_read_its_own_limits() -> None:
    rule = rule_for(POLICY, "prlimit64")
    assert rule is not None
    assert rule.when == ((syscalls.ArgCheck(0, 0), syscalls.ArgCheck(2, 0)),)


def test_guard_prefix_is_whole_instructions() -> None:
    prefix = syscalls.guard_prefix(POLICY)
    assert len(prefix) % 8 == 0
    assert len(prefix) // 8 == 8


def run_bpf(
    program: bytes, nr: int, arch: int = AUDIT_ARCH_X86_64, args: tuple[int, ...] = ()
) -> int:
    """Evaluate classic BPF over a seccomp_data record (just the opcodes libseccomp emits)."""
    padded = (*args, *([0] * (6 - len(args))))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *padded)
    insns = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    acc, index, pc = 0, 0, 0
    scratch = [0] * 16
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x00:
            acc = k
        elif code == 0x01:
            index = k
        elif code == 0x02:
            scratch[k] = acc
        elif code == 0x60:
            acc = scratch[k]
        elif code == 0x54:
            acc &= k
        elif code == 0x07:
            index = acc
        elif code == 0x87:
            acc = index
        elif code == 0x05:
            pc += k
        elif code in (0x15, 0x25, 0x35, 0x45):
            taken = {
                0x15: acc == k,
                0x25: acc > k,
                0x35: acc >= k,
                0x45: bool(acc & k),
            }[code]
            pc += jt if taken else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {code:#x} not modelled")


@pytest.fixture(scope="module")
def program() -> bytes:
    pytest.importorskip("pyseccomp")
    from agent_runner.plugins.child.forkserver import export_seccomp_bpf

    return export_seccomp_bpf(POLICY)


EPERM_RET = SECCOMP_RET_ERRNO | 1
ENOSYS_RET = SECCOMP_RET_ERRNO | 38


@pytest.mark.parametrize(
    ("nr", "args", "expected"),
    [
        (0, (), SECCOMP_RET_ALLOW),  # read
        (101, (), SECCOMP_RET_KILL_PROCESS),  # ptrace
        (321, (), SECCOMP_RET_KILL_PROCESS),  # bpf
        (41, (), EPERM_RET),  # socket
        (59, (), EPERM_RET),  # execve
        (105, (), EPERM_RET),  # setuid: unlisted
        (435, (), ENOSYS_RET),  # clone3
        (470, (), ENOSYS_RET),  # newer than the table
        (0xFFFF, (), ENOSYS_RET),
        (56, (0x3D0F00,), EPERM_RET),  # pthread_create's clone: no threads
        (56, (0x01200011,), EPERM_RET),  # fork-style clone
        (62, (1234, 10), EPERM_RET),  # kill, even of itself
        (234, (1234, 1234, 6), EPERM_RET),  # tgkill, even of itself (abort)
        (302, (0, 7, 0, 0x7FF0), SECCOMP_RET_ALLOW),  # getrlimit via prlimit64
        (302, (0, 0, 0x7FF0, 0), EPERM_RET),  # setrlimit via prlimit64
        (302, (1, 7, 0, 0x7FF0), EPERM_RET),  # another process's limits
        (16, (1, 0x5401), SECCOMP_RET_ALLOW),  # ioctl TCGETS
        (16, (1, 0x5401 | (1 << 32)), EPERM_RET),  # high bits set: not TCGETS as listed
        (16, (1, 0x40086602), EPERM_RET),  # ioctl FS_IOC_SETFLAGS
        (16, (1, 0x5412), EPERM_RET),  # ioctl TIOCSTI
        (72, (1, 1030), SECCOMP_RET_ALLOW),  # fcntl F_DUPFD_CLOEXEC
        (72, (1, 1024), EPERM_RET),  # fcntl F_SETLEASE
        (72, (1, 8), EPERM_RET),  # fcntl F_SETOWN
        (90, (), EPERM_RET),  # chmod
        (0x40000000 | 0, (), SECCOMP_RET_KILL_PROCESS),  # x32 ABI
    ],
)
def test_compiled_filter_decides_as_the_table_says(
    program: bytes, nr: int, args: tuple[int, ...], expected: int
) -> None:
    assert run_bpf(program, nr, args=args) == expected


def test_compiled_filter_kills_foreign_architectures(program: bytes) -> None:
    assert run_bpf(program, 20, arch=AUDIT_ARCH_I386) == SECCOMP_RET_KILL_PROCESS
