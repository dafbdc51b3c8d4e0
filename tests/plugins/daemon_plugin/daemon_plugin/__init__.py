"""An observer that double-forks a daemon and returns, leaving it behind if it can.

The daemon writes its pid into @MARKER_DIR@/daemon-<pid> and sleeps; the observer reports
the pid (or why it could not fork) as a `forked` event.
"""

import os
import time

from agent_runner.plugins import PluginManifest, RoundReport

MARKERS = "@MARKER_DIR@"


def leave_daemon(view):
    try:
        first = os.fork()
    except OSError as exc:
        return RoundReport(events=[("forked", {"error": f"{type(exc).__name__}: {exc}"})])
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            # Named only once written: the observer returns as soon as it sees the name.
            ready = os.path.join(MARKERS, f".writing-{os.getpid()}")
            with open(ready, "w") as marker:
                marker.write(str(os.getpid()))
            os.rename(ready, os.path.join(MARKERS, f"daemon-{os.getpid()}"))
            time.sleep(3600)
        os._exit(0)
    os.waitpid(first, 0)
    for _ in range(200):
        found = [name for name in os.listdir(MARKERS) if name.startswith("daemon-")]
        if found:
            return RoundReport(events=[("forked", {"pid": int(found[0].split("-")[1])})])
        time.sleep(0.01)
    return RoundReport(events=[("forked", {"error": "the daemon wrote no marker"})])


PLUGIN = PluginManifest(
    name="daemon_plugin", round_observers=(leave_daemon,), event_kinds=("forked",)
)
