"""`plugins list`: every discovered plugin with its provenance, pin state and digest.

Read-only and imports no plugin code: it reads installed metadata, hashes files, and takes
what serve admitted (families, state) from state.json.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_runner.config import Config
from agent_runner.observe.contracts import PluginEntry, from_json, to_json
from agent_runner.plugins.admission import discovery
from agent_runner.plugins.admission.trust import Assessment, assess_all, running_package
from agent_runner.plugins.admission.verdict import builtin_verdict
from agent_runner.plugins.builtin import BUILTINS
from agent_runner.supervisor.loop.state import read_state


def plugin_rows(config: Config) -> list[PluginEntry]:
    """One entry per builtin and per discovered third-party entry point."""
    admitted = _admitted_by_serve(config)
    rows = [PluginEntry(**to_json(builtin_verdict(name).to_dict())) for name in BUILTINS]
    candidates = discovery.installed(config.runtime.work_dir)
    pins = config.plugins.pin
    for checked in assess_all(candidates, pins, running_package()):
        if checked.provenance != "builtin":
            rows.append(_row(checked, config, admitted))
    return rows


def _row(
    checked: Assessment, config: Config, admitted: dict[tuple[str, str, str], PluginEntry]
) -> PluginEntry:
    candidate = checked.candidate
    dist = candidate.dist
    row = PluginEntry(
        name=candidate.name,
        kind=checked.provenance,
        dist=dist.name,
        version=dist.version,
        site=str(dist.site),
        pin=checked.pin,
        pin_state=checked.pin_state,
        digest=checked.digest,
        reason=checked.reason,
        state="disabled" if candidate.name in config.plugins.disable else "not_admitted",
    )
    seen = admitted.get((candidate.name, dist.name, str(dist.site)))
    # What serve decided holds only for the files it saw: a changed distribution is news.
    if seen is not None and seen.digest in (None, checked.digest):
        row = replace(
            row,
            state=seen.state,
            families=seen.families,
            event_kinds=seen.event_kinds,
            tier=seen.tier,
            failures=seen.failures,
            reason=seen.reason if seen.state in ("refused", "quarantined") else row.reason,
        )
    return row


def _admitted_by_serve(config: Config) -> dict[tuple[str, str, str], PluginEntry]:
    """The verdicts the last serve left in state.json, by (name, dist, site)."""
    verdicts: Any = read_state(config.runtime.log_dir).get("plugins")
    if not isinstance(verdicts, list):
        return {}
    found = {}
    for verdict in verdicts:
        entry = from_json(PluginEntry, verdict)
        if entry is not None and entry.kind != "builtin":
            found[(entry.name, entry.dist, entry.site)] = entry
    return found


def render_rows(rows: list[PluginEntry]) -> str:
    """The entries as a readable block per plugin."""
    lines = []
    for row in rows:
        where = "" if row.kind == "builtin" else f" ({row.site})"
        lines.append(f"{row.name}  {row.kind}  {row.dist} {row.version}{where}")
        if row.kind != "builtin":
            lines.append(f"  pin       {row.pin_state}")
            lines.append(f"  digest    {row.digest or '-'}")
        failures = f" ({row.failures} failed calls in a row)" if row.failures else ""
        state = "not admitted yet" if row.state == "not_admitted" else row.state
        lines.append(f"  state     {state}{failures}")
        if row.reason:
            lines.append(f"  reason    {row.reason}")
        lines.append(f"  families  {format_families(row.families)}")
    return "\n".join(lines)


def format_families(families: dict[str, list[str]] | None) -> str:
    """`spawn: a, b; observe: c`, or what is known instead."""
    if families is None:
        return "not admitted yet"
    named = [f"{family}: {', '.join(hooks)}" for family, hooks in families.items() if hooks]
    return "; ".join(named) or "none"
