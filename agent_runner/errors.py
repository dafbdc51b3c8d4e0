"""Every error the program reports, and the exit code each one means (SPEC §10)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit statuses; the systemd unit's RestartPreventExitStatus is rendered from these."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    NOT_RUNNING = 3  # `status`: serve is not running (the LSB code `systemctl status` uses)
    GAVE_UP = 69  # EX_UNAVAILABLE: a breaker tripped; restarting would burn quota
    LOCKED = 73  # EX_CANTCREAT: another serve holds the lock
    CONFIG = 78  # EX_CONFIG: bad config, or a required sandbox is not achievable
    INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C before serve took over its signals, or any command


class AgentRunnerError(Exception):
    """Base of every error the CLI turns into a one-line message and an exit code."""

    exit_code: ExitCode = ExitCode.FAILURE


class ConfigError(AgentRunnerError):
    """The configuration file is missing, unreadable or invalid."""

    exit_code = ExitCode.CONFIG


class ConfinementUnavailable(AgentRunnerError):
    """`sandbox = "require"` asked for a tier this host cannot enforce."""

    exit_code = ExitCode.CONFIG


class LockHeld(AgentRunnerError):
    """Another serve already supervises this project."""

    exit_code = ExitCode.LOCKED


class GitError(AgentRunnerError):
    """A git command failed or timed out; the work tree was left as it was."""


class WorkTreeChanged(GitError):
    """work_dir, or the repository in it, is no longer the one serve started with.

    Whatever git would do now it would do to something else, so serve stops and does not
    restart into it.
    """

    exit_code = ExitCode.GAVE_UP


class EventLogError(AgentRunnerError):
    """The event log cannot be written safely (symlink, read-only directory).

    It is a configuration problem (log_dir points somewhere unusable), so systemd must not
    restart into it.
    """

    exit_code = ExitCode.CONFIG


class UsageError(AgentRunnerError):
    """The command line asked for something that does not exist (e.g. a bad --select path)."""

    exit_code = ExitCode.USAGE


class SystemdError(AgentRunnerError):
    """`install` or `uninstall` cannot do what was asked; nothing was changed."""
