"""office_hours: keep an agent to working hours, commit only its docs, count its tool calls.

An agent-runner plugin with one hook of each family. Settings, from agent-runner.toml:

    [plugins.settings.office_hours]
    start_hour = 9          # the first hour the agent may start in (0-23)
    end_hour = 18           # the hour it may no longer start in (1-24); may wrap past midnight
    timezone = "Europe/Berlin"   # an IANA zone name, or "UTC"; default: the host's local time
    docs_dir = "docs"       # the folder whose changes are committed
"""

from __future__ import annotations

from agent_runner.plugins import DirtyIntent, PluginManifest, RoundReport, SpawnDecision
from office_hours import hours, transcript


def within_office_hours(view):
    """Spawn hook: proceed inside the hours; outside, defer until they start."""
    now = hours.local_now(view.settings.get("timezone"))
    start = int(view.settings.get("start_hour", 9))
    end = int(view.settings.get("end_hour", 18))
    wait_s = hours.seconds_until_open(now, start, end)
    if wait_s == 0:
        return SpawnDecision.proceed()
    # agent-runner asks again after the defer: a long wait is several defers of at most this.
    defer_s = max(1, min(wait_s, view.max_defer_s))
    return SpawnDecision.defer(
        defer_s, reason=f"outside office hours ({start:02d}:00-{end:02d}:00)"
    )


def commit_docs_only(view):
    """Dirty handler: commit the changes under docs_dir; agent-runner stashes the rest."""
    folder = str(view.settings.get("docs_dir", "docs")).strip("/") + "/"
    docs = [path for path in view.files if path.startswith(folder)]
    if not docs:
        # An empty path list would mean "commit everything": stash instead.
        return DirtyIntent.stash(f"office_hours: round {view.round} changed no {folder}")
    return DirtyIntent.commit(f"docs from round {view.round}", paths=docs)


def count_tool_calls(view):
    """Round observer: report the tool calls in a Claude transcript; an overload is transient."""
    seen = transcript.read_claude(view.transcript_tail)
    overloaded = {"classification": "api_transient_5xx", "reset_at": None}
    return RoundReport(
        events=[("tool_calls", {"round": view.round, "count": seen.tool_calls})],
        transient=overloaded if seen.overloaded else None,
    )


PLUGIN = PluginManifest(
    name="office_hours",
    spawn_hooks=(within_office_hours,),
    dirty_handlers=(commit_docs_only,),
    round_observers=(count_tool_calls,),
    event_kinds=("tool_calls",),
)
