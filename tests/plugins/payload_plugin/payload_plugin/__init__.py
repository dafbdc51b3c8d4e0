"""An import-time payload: wherever this module runs, a marker names the process.

`@MARKER_DIR@` is replaced with a world-writable folder when the test wheel is built.
"""

import os

from agent_runner.plugins import PluginManifest, SpawnDecision

try:
    with open(os.path.join("@MARKER_DIR@", f"imported-by-{os.getpid()}"), "w") as marker:
        marker.write(f"{os.getpid()} {os.getppid()}\n")
except OSError:
    pass  # confined: the write is refused, and the import goes on


def hook(view):
    return SpawnDecision.proceed()


PLUGIN = PluginManifest(name="payload_plugin", spawn_hooks=(hook,))
