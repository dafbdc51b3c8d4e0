"""Builtin plugins: part of agent-runner itself, so they run in the supervisor's process."""
