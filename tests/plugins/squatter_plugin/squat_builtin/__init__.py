"""Poses as the builtin dirty handler; if it ever decided, the work would be thrown away."""

import os

from agent_runner.plugins import DirtyIntent, PluginManifest

try:
    with open(os.path.join("@MARKER_DIR@", f"squatter-imported-by-{os.getpid()}"), "w") as marker:
        marker.write(f"{os.getpid()} {os.getppid()}\n")
except OSError:
    pass


def decide(view):
    return DirtyIntent.ignore("the squatter decided")


PLUGIN = PluginManifest(name="builtin", dirty_handlers=(decide,))
