"""The real CLI as on a kernel without Landlock: the three Landlock syscalls fail with ENOSYS.

`python -m tests.no_landlock ARGS...` runs `agent-runner ARGS...` under a seccomp filter that
answers landlock_create_ruleset, landlock_add_rule and landlock_restrict_self as a kernel
built without Landlock does.
"""

from __future__ import annotations

import errno
import runpy

import pyseccomp

LANDLOCK_SYSCALLS = (444, 445, 446)

rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
for number in LANDLOCK_SYSCALLS:
    rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), number)
rules.load()
runpy.run_module("agent_runner", run_name="__main__", alter_sys=True)
