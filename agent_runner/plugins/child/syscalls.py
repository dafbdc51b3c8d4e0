"""The seccomp policy for confined plugin children, as data, and the pure helpers around it.

An allow-list: anything not listed fails with EPERM, escape syscalls kill the process,
and numbers above the highest one the table knows fail with ENOSYS.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

Action = Literal["allow", "eperm", "enosys", "kill"]

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
# ioctl requests a hook's interpreter makes (measured: TCGETS from isatty() on every open());
# the rest of the ioctl space changes files or descriptors behind Landlock's back.
IOCTL_ALLOWED = {
    "TCGETS": 0x5401,  # isatty(): io.open() asks on every file it opens
    "TIOCGWINSZ": 0x5413,  # os.get_terminal_size(), shutil
    "FIONREAD": 0x541B,  # bytes waiting on a pipe or file
    "FIONBIO": 0x5421,  # os.set_blocking()
    "FIONCLEX": 0x5450,  # os.set_inheritable(fd, True)
    "FIOCLEX": 0x5451,  # os.set_inheritable(fd, False)
}
# fcntl commands that only read or set a descriptor's own flags, or take advisory locks that
# die with the call; leases, directory notification, owners and signals are left out.
FCNTL_ALLOWED = {
    "F_DUPFD": 0,
    "F_GETFD": 1,
    "F_SETFD": 2,
    "F_GETFL": 3,
    "F_SETFL": 4,
    "F_GETLK": 5,
    "F_SETLK": 6,
    "F_SETLKW": 7,
    "F_OFD_GETLK": 36,
    "F_OFD_SETLK": 37,
    "F_OFD_SETLKW": 38,
    "F_DUPFD_CLOEXEC": 1030,
    "F_GETPIPE_SZ": 1032,
}

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM = 1
ENOSYS = 38

_BPF_LD_W_ABS = 0x20
_BPF_JMP_JEQ_K = 0x15
_BPF_JMP_JGE_K = 0x35
_BPF_JMP_JGT_K = 0x25
_BPF_RET_K = 0x06
_INSN = struct.Struct("=HBBI")


@dataclass(frozen=True)
class ArgCheck:
    """Holds when the whole 64-bit `arg[index] == value` (upper bits set: no match)."""

    index: int
    value: int


Condition = tuple[ArgCheck, ...]  # every check holds


@dataclass(frozen=True)
class Rule:
    """One syscall, what happens when the child makes it, and why.

    With `when`, the action applies only if one of the conditions holds; otherwise the
    policy's default does.
    """

    name: str
    nr: int
    action: Action
    reason: str
    when: tuple[Condition, ...] = ()


@dataclass(frozen=True)
class Policy:
    """A complete filter: the rules, the default for unlisted syscalls, the highest known number."""

    arch: int
    rules: tuple[Rule, ...]
    default: Action
    max_nr: int


def _rules(action: Action, reason: str, pairs: str) -> tuple[Rule, ...]:
    out = []
    for pair in pairs.split():
        name, nr = pair.split("=")
        out.append(Rule(name, int(nr), action, reason))
    return tuple(out)


_ALLOW_IO = _rules(
    "allow",
    "file and pipe I/O on descriptors and paths Landlock already confines",
    "read=0 write=1 open=2 close=3 stat=4 fstat=5 lstat=6 poll=7 lseek=8 pread64=17 "
    "pwrite64=18 readv=19 writev=20 access=21 pipe=22 select=23 dup=32 dup2=33 "
    "flock=73 fsync=74 fdatasync=75 truncate=76 ftruncate=77 getdents=78 "
    "getcwd=79 chdir=80 fchdir=81 rename=82 mkdir=83 rmdir=84 creat=85 link=86 "
    "unlink=87 symlink=88 readlink=89 umask=95 statfs=137 fstatfs=138 getdents64=217 "
    "fadvise64=221 openat=257 mkdirat=258 newfstatat=262 unlinkat=263 renameat=264 "
    "linkat=265 symlinkat=266 readlinkat=267 faccessat=269 pselect6=270 ppoll=271 "
    "dup3=292 pipe2=293 preadv=295 pwritev=296 renameat2=316 copy_file_range=326 "
    "preadv2=327 pwritev2=328 statx=332 close_range=436 faccessat2=439 "
    "epoll_create1=291 epoll_ctl=233 epoll_wait=232 epoll_pwait=281 epoll_pwait2=441 "
    "eventfd2=290 sendfile=40",
)
_ALLOW_MEMORY = _rules(
    "allow",
    "the interpreter's own memory management; bounded by RLIMIT_AS",
    "mmap=9 mprotect=10 munmap=11 brk=12 mremap=25 msync=26 mincore=27 madvise=28 "
    "membarrier=324 mseal=462",
)
_ALLOW_RUNTIME = _rules(
    "allow",
    "signal handling, time and identity queries the runtime makes",
    "rt_sigaction=13 rt_sigprocmask=14 rt_sigreturn=15 sched_yield=24 pause=34 "
    "nanosleep=35 getitimer=36 alarm=37 setitimer=38 getpid=39 exit=60 wait4=61 "
    "uname=63 gettimeofday=96 getrlimit=97 getrusage=98 sysinfo=99 times=100 getuid=102 "
    "getgid=104 geteuid=107 getegid=108 getppid=110 getpgrp=111 getgroups=115 "
    "getresuid=118 getresgid=120 getpgid=121 getsid=124 rt_sigpending=127 "
    "rt_sigtimedwait=128 rt_sigsuspend=130 sigaltstack=131 getpriority=140 "
    "sched_getparam=143 sched_getscheduler=145 sched_get_priority_max=146 "
    "sched_get_priority_min=147 sched_rr_get_interval=148 arch_prctl=158 gettid=186 "
    "time=201 futex=202 sched_getaffinity=204 set_tid_address=218 restart_syscall=219 "
    "clock_gettime=228 clock_getres=229 clock_nanosleep=230 exit_group=231 "
    "set_robust_list=273 getcpu=309 getrandom=318 rseq=334 futex_waitv=449 "
    "futex_wake=454 futex_wait=455 futex_requeue=456",
)
_KILL = _rules(
    "kill",
    "escape or kernel-attack surface: no legitimate hook needs it, so the attempt ends the call",
    "ptrace=101 process_vm_readv=310 process_vm_writev=311 bpf=321 perf_event_open=298 "
    "keyctl=250 add_key=248 request_key=249 mount=165 umount2=166 pivot_root=155 "
    "move_mount=429 open_tree=428 fsopen=430 fsconfig=431 fsmount=432 fspick=433 "
    "mount_setattr=442 open_tree_attr=467 unshare=272 setns=308 io_uring_setup=425 "
    "io_uring_enter=426 io_uring_register=427 userfaultfd=323 kexec_load=246 "
    "kexec_file_load=320 init_module=175 finit_module=313 delete_module=176 "
    "pidfd_getfd=438 open_by_handle_at=304",
)
_EPERM = (
    *_rules("eperm", "no sockets: no network, no pathname unix sockets", "socket=41 socketpair=53"),
    *_rules("eperm", "no new programs", "execve=59 execveat=322"),
    *_rules(
        "eperm",
        "one task per call: no processes and no threads (a call is bounded to its one task)",
        "fork=57 vfork=58 clone=56",
    ),
    *_rules("eperm", "anonymous executable-capable files", "memfd_create=319"),
    *_rules(
        "eperm",
        "no signals at all: nobody to signal, and a signal to itself could fake how the call ended",
        "kill=62 tkill=200 tgkill=234 pidfd_send_signal=424 rt_sigqueueinfo=129 "
        "rt_tgsigqueueinfo=297",
    ),
    *_rules(
        "eperm",
        "file modes, owners and times are outside what Landlock covers",
        "chmod=90 fchmod=91 fchmodat=268 fchmodat2=452 chown=92 fchown=93 lchown=94 "
        "fchownat=260 utime=132 utimes=235 futimesat=261 utimensat=280",
    ),
)
_CONDITIONAL = (
    Rule(
        "ioctl",
        16,
        "allow",
        "only the requests in IOCTL_ALLOWED (EPERM for the rest)",
        tuple((ArgCheck(1, request),) for request in IOCTL_ALLOWED.values()),
    ),
    Rule(
        "fcntl",
        72,
        "allow",
        "only the commands in FCNTL_ALLOWED (EPERM for the rest)",
        tuple((ArgCheck(1, command),) for command in FCNTL_ALLOWED.values()),
    ),
    Rule(
        "prlimit64",
        302,
        "allow",
        "reading its own limits only (pid 0, no new limit): lowering one could fake an ending",
        ((ArgCheck(0, 0), ArgCheck(2, 0)),),
    ),
)
_ENOSYS = (
    Rule("clone3", 435, "enosys", "ENOSYS, as on an older kernel: libc then tries clone (EPERM)"),
)
# The highest x86_64 syscall number this table was written against (file_setattr, Linux 6.17).
MAX_KNOWN_NR_X86_64 = 469


def child_policy() -> Policy:
    """The seccomp policy applied to every confined plugin call on x86_64."""
    rules = (*_ALLOW_IO, *_ALLOW_MEMORY, *_ALLOW_RUNTIME, *_CONDITIONAL, *_KILL, *_EPERM, *_ENOSYS)
    return Policy(AUDIT_ARCH_X86_64, rules, "eperm", MAX_KNOWN_NR_X86_64)


def action_value(action: Action) -> int:
    """The SECCOMP_RET_* value for an action."""
    return {
        "allow": SECCOMP_RET_ALLOW,
        "eperm": SECCOMP_RET_ERRNO | EPERM,
        "enosys": SECCOMP_RET_ERRNO | ENOSYS,
        "kill": SECCOMP_RET_KILL_PROCESS,
    }[action]


def guard_prefix(policy: Policy) -> bytes:
    """Classic BPF run before the table: foreign arch or x32 kills, unknown high numbers ENOSYS."""
    insns = [
        (_BPF_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JMP_JEQ_K, 1, 0, policy.arch),
        (_BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (_BPF_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
        (_BPF_JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
        (_BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (_BPF_JMP_JGT_K, 0, 1, policy.max_nr),
        (_BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS),
    ]
    return b"".join(_INSN.pack(*insn) for insn in insns)


def rule_for(policy: Policy, name: str) -> Rule | None:
    """The rule for a syscall name, or None when the default applies."""
    return next((rule for rule in policy.rules if rule.name == name), None)
