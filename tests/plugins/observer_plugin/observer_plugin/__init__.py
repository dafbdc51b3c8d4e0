"""An observer whose events and transient come from its settings, good or bad."""

import time

from agent_runner.plugins import PluginManifest, RoundReport


def report(view):
    settings = view.settings
    events = [(kind, dict(fields)) for kind, fields in settings.get("events", [])]
    transient = None
    if "classification" in settings:
        reset_in_s = settings.get("reset_in_s")
        transient = {
            "classification": settings["classification"],
            "reset_at": None if reset_in_s is None else time.time() + reset_in_s,
        }
    return RoundReport(events=events, transient=transient)


PLUGIN = PluginManifest(name="observer_plugin", round_observers=(report,), event_kinds=("noted",))
