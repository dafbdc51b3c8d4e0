"""The builtin dirty handler: `[vcs] dirty_action` and the exit cause decide, nothing else.

A pure function of the view, like every dirty handler: the supervisor executes the intent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from agent_runner.plugins import DirtyIntent, PluginManifest

DIRTY_ACTIONS = ("stash", "commit", "ignore")


class DirtyViewLike(Protocol):
    """The part of the supervisor's dirty view this handler reads."""

    @property
    def round(self) -> int: ...

    @property
    def exit_cause(self) -> str: ...

    @property
    def settings(self) -> Mapping[str, Any]: ...


def stash_message(round_no: int, exit_cause: str) -> str:
    """The stash entry's message for work left by round `round_no`."""
    return f"agent-runner round {round_no} ({exit_cause})"


def commit_message(round_no: int) -> str:
    """The commit message for work left by a clean round."""
    return f"agent-runner: round {round_no}"


def decide(view: DirtyViewLike) -> DirtyIntent:
    """Stash, commit or ignore per `view.settings["dirty_action"]` (default and fallback: stash)."""
    action = view.settings.get("dirty_action", "stash")
    if action == "ignore":
        return DirtyIntent.ignore('dirty_action = "ignore"')
    if action == "commit" and view.exit_cause == "clean":
        return DirtyIntent.commit(commit_message(view.round))
    # Half-done work is never committed; an unknown action must not lose work either.
    return DirtyIntent.stash(stash_message(view.round, view.exit_cause))


# `[vcs] dirty_handler = "builtin"` names this plugin.
PLUGIN = PluginManifest(name="builtin", dirty_handlers=(decide,))
