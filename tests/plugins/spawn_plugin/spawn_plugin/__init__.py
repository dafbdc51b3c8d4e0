"""Spawn hooks with defers no loop may obey, one that skips every round, one that tells.

Each hook acts only when its name is in `settings.enabled`; otherwise it says proceed.
`report_view` raises with its view as JSON, so the view arrives in `hook_failed`'s detail.
"""

import json

from agent_runner.plugins import PluginManifest, SpawnDecision


def _enabled(view, name):
    return name in view.settings.get("enabled", [])


def defer_half_second(view):
    return (
        SpawnDecision.defer(0.5) if _enabled(view, "defer_half_second") else SpawnDecision.proceed()
    )


def defer_negative(view):
    return SpawnDecision.defer(-5) if _enabled(view, "defer_negative") else SpawnDecision.proceed()


def defer_nan(view):
    return (
        SpawnDecision.defer(float("nan"))
        if _enabled(view, "defer_nan")
        else SpawnDecision.proceed()
    )


def defer_infinite(view):
    return (
        SpawnDecision.defer(float("inf"))
        if _enabled(view, "defer_infinite")
        else SpawnDecision.proceed()
    )


def defer_huge(view):
    return SpawnDecision.defer(10**400) if _enabled(view, "defer_huge") else SpawnDecision.proceed()


def defer_past_max(view):
    if not _enabled(view, "defer_past_max"):
        return SpawnDecision.proceed()
    return SpawnDecision.defer(view.max_defer_s + 1)


def always_skip(view):
    return (
        SpawnDecision.skip("never today")
        if _enabled(view, "always_skip")
        else SpawnDecision.proceed()
    )


def report_view(view):
    if not _enabled(view, "report_view"):
        return SpawnDecision.proceed()
    watched = set(view.settings.get("watch_env", []))
    shown = {
        "round": view.round,
        "last_round": view.last_round,
        "argv": view.argv,
        "env_names": [name for name in view.env_names if name in watched or "=" in name],
        "max_defer_s": view.max_defer_s,
    }
    raise RuntimeError(json.dumps(shown, sort_keys=True))


PLUGIN = PluginManifest(
    name="spawn_plugin",
    spawn_hooks=(
        defer_half_second,
        defer_negative,
        defer_nan,
        defer_infinite,
        defer_huge,
        defer_past_max,
        always_skip,
        report_view,
    ),
)
