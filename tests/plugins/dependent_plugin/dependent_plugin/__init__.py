import tomli_w

from agent_runner.plugins import PluginManifest, RoundReport


def record(view):
    return RoundReport(events=[("settings", {"toml": tomli_w.dumps(dict(view.settings))})])


PLUGIN = PluginManifest(
    name="dependent_plugin", round_observers=(record,), event_kinds=("settings",)
)
