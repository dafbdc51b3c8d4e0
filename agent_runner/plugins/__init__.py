"""The public API for plugin authors: the manifest, the hook results, and nothing else.

This module must stay importable inside the confined child: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["DirtyIntent", "PluginManifest", "RoundReport", "SpawnDecision"]

Hook = Callable[[Any], Any]


@dataclass(frozen=True)
class SpawnDecision:
    """What a spawn hook wants done with the next agent spawn.

    Build one with `SpawnDecision.proceed()`, `SpawnDecision.defer(seconds, reason=...)`
    or `SpawnDecision.skip(reason)`. Only plugins listed in `[plugins]
    spawn_override_allow` may defer or skip; anything else is treated as proceed.
    """

    action: Literal["proceed", "defer", "skip"]
    defer_s: float = 0.0
    reason: str = ""

    @classmethod
    def proceed(cls) -> SpawnDecision:
        """Spawn the agent now.

        Returns:
            The decision.
        """
        return cls("proceed")

    @classmethod
    def defer(cls, seconds: float, reason: str = "") -> SpawnDecision:
        """Wait `seconds` (1..max_defer_s) before asking again.

        Args:
            seconds: How long to wait before the spawn gates run again.
            reason: A short human-readable reason, written into the event.

        Returns:
            The decision.
        """
        # Kept as given: a value no float can hold must fail the call's check, not the hook.
        return cls("defer", seconds, reason)

    @classmethod
    def skip(cls, reason: str) -> SpawnDecision:
        """Skip this round entirely.

        Args:
            reason: A short human-readable reason, written into the event.

        Returns:
            The decision.
        """
        return cls("skip", 0.0, reason)


@dataclass(frozen=True)
class DirtyIntent:
    """What a dirty handler wants done with the work left in the tree.

    The supervisor validates the intent, executes it with hardened git and
    verifies the result; the handler itself never writes to the work tree.
    """

    action: Literal["stash", "commit", "ignore"]
    message: str = ""
    paths: tuple[str, ...] = ()

    @classmethod
    def stash(cls, message: str) -> DirtyIntent:
        """Stash every change, untracked files included, under `message`.

        Args:
            message: The stash entry's message.

        Returns:
            The intent.
        """
        return cls("stash", message)

    @classmethod
    def commit(cls, message: str, paths: Sequence[str] = ()) -> DirtyIntent:
        """Commit `paths` (a subset of the dirty files; empty means all of them).

        Args:
            message: The commit message.
            paths: Dirty paths to commit; every one must be in the dirty list.

        Returns:
            The intent.
        """
        return cls("commit", message, tuple(paths))

    @classmethod
    def ignore(cls, reason: str) -> DirtyIntent:
        """Leave the tree as it is.

        Args:
            reason: Why, written into the event.

        Returns:
            The intent.
        """
        return cls("ignore", reason)


@dataclass(frozen=True)
class RoundReport:
    """What a round observer reports after a round.

    Attributes:
        events: `(kind, fields)` pairs, written as `<plugin>.<kind>` events.
        transient: None, or `{"classification": ..., "reset_at": epoch | None}`
            to make the loop back off as if the transcript parser had found it.
    """

    events: Sequence[tuple[str, Mapping[str, Any]]] = ()
    transient: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class PluginManifest:
    """A plugin's declaration, bound to `PLUGIN` at module level.

    Attributes:
        name: The plugin's name; must equal its entry-point name.
        spawn_hooks: Functions `(view) -> SpawnDecision`, called before each spawn.
        dirty_handlers: Functions `(view) -> DirtyIntent`; used when `[vcs]
            dirty_handler` names this plugin.
        round_observers: Functions `(view) -> RoundReport | None`, called after each round.
        event_kinds: Event kinds (without the plugin prefix) this plugin may emit.
    """

    name: str
    spawn_hooks: tuple[Hook, ...] = ()
    dirty_handlers: tuple[Hook, ...] = ()
    round_observers: tuple[Hook, ...] = ()
    event_kinds: tuple[str, ...] = field(default=())
