"""agent-runner: a restart-on-exit supervisor for autonomous coding CLIs."""

__version__ = "0.1.0"
