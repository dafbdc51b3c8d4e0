"""A spawn hook that sleeps `sleep_s` (in the rounds listed in `rounds`, or every round)."""

import time

from agent_runner.plugins import PluginManifest, SpawnDecision


def stall(view):
    rounds = view.settings.get("rounds")
    if rounds is None or view.round in rounds:
        time.sleep(float(view.settings.get("sleep_s", 3600)))
    return SpawnDecision.proceed()


PLUGIN = PluginManifest(name="stalling_plugin", spawn_hooks=(stall,))
