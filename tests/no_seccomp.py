"""The real CLI as on a host without pyseccomp or libseccomp: the binding cannot be imported.

`python -m tests.no_seccomp ARGS...` runs `agent-runner ARGS...` with seccomp switched off the
way such a host has it (no binding to find), so the sandbox probe reaches tier `landlock`.
"""

from __future__ import annotations

import runpy
import sys

sys.modules["pyseccomp"] = None  # type: ignore[assignment]  # find_spec and import both fail
runpy.run_module("agent_runner", run_name="__main__", alter_sys=True)
