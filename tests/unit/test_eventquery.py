"""`events --kind`: checked against the registry and the kinds of admitted plugins."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runner.errors import UsageError
from agent_runner.observe.eventquery import check_kinds
from agent_runner.supervisor.loop.state import write_state


def test_registered_kinds_pass_and_a_typo_names_the_kind_meant(tmp_path: Path) -> None:
    check_kinds(["round_start", "backoff_wait"], tmp_path)
    with pytest.raises(UsageError, match=r"--kind 'round_strat'.*did you mean round_start( or|\?)"):
        check_kinds(["round_start", "round_strat"], tmp_path)


def test_a_kind_like_nothing_gets_no_guess(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no such event kind \(docs/events.md") as raised:
        check_kinds(["zzzzzz"], tmp_path)
    assert "did you mean" not in str(raised.value)


def test_the_kinds_an_admitted_plugin_declared_are_allowed(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such event kind"):
        check_kinds(["office_hours.tool_calls"], tmp_path)
    plugins = [
        {"name": "office_hours", "event_kinds": ["tool_calls"]},
        {"name": "broken", "event_kinds": "not a list"},
        "not a verdict",
    ]
    write_state(tmp_path, {"plugins": plugins})
    check_kinds(["office_hours.tool_calls"], tmp_path)
    with pytest.raises(UsageError, match=r"did you mean office_hours.tool_calls\?"):
        check_kinds(["office_hours.tool_call"], tmp_path)
