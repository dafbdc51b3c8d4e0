"""A well-behaved plugin whose hooks depend on a sibling module of its own distribution."""

from agent_runner.plugins import PluginManifest, RoundReport, SpawnDecision
from good_plugin import helpers


def office_hours(view):
    return SpawnDecision.skip(helpers.REASON)


def count_lines(view):
    return RoundReport(events=[("lines", {"count": len(view.transcript_tail.splitlines())})])


PLUGIN = PluginManifest(
    name="good_plugin",
    spawn_hooks=(office_hours,),
    round_observers=(count_lines,),
    event_kinds=("lines",),
)
