"""An observer that allocates 8 GiB; a spawn hook that floods stdout and stderr, then proceeds."""

import os

from agent_runner.plugins import PluginManifest, RoundReport, SpawnDecision

FLOOD_BYTES = 64 << 20


def flood(view):
    chunk = b"x" * (1 << 20)
    for _ in range(FLOOD_BYTES // len(chunk)):
        os.write(1, chunk)
        os.write(2, chunk)
    return SpawnDecision.proceed()


def allocate(view):
    hoard = bytearray(8 << 30)
    return RoundReport(events=[("hoarded", {"bytes": len(hoard)})])


PLUGIN = PluginManifest(
    name="hog_plugin", spawn_hooks=(flood,), round_observers=(allocate,), event_kinds=("hoarded",)
)
