"""Builtin plugins: part of agent-runner itself, so they run in the supervisor's process.

`BUILTINS` is the static set: entry-point name -> value, exactly as agent-runner's own
pyproject.toml declares it. Nothing else is builtin, whatever its metadata claims.
"""

BUILTINS = {"builtin": "agent_runner.plugins.builtin.dirty:PLUGIN"}
