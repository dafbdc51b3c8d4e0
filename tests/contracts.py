"""Parse a command's --json output and hold it to its schema (agent_runner.observe.contracts)."""

from __future__ import annotations

import json
from typing import Any

from agent_runner.events import REGISTRY
from agent_runner.observe.contracts import DOCUMENTS, SCHEMA_VERSION, EventLine, problems


def conforming(command: str, stdout: str) -> Any:
    """The document `command` printed (e.g. "peek --json"), failing the test unless it conforms."""
    document = json.loads(stdout)
    found = problems(DOCUMENTS[command], document)
    assert found == [], f"{command} does not match its schema: {found}\n{stdout[:2000]}"
    assert document["schema_version"] == SCHEMA_VERSION
    return document


def conforming_lines(stdout: str, plugin_kinds: frozenset[str] = frozenset()) -> list[Any]:
    """Every line `events --json` printed, each an event of a known kind with its fields."""
    lines = [json.loads(line) for line in stdout.splitlines()]
    for line in lines:
        assert problems(EventLine, line) == [], line
        assert line["schema_version"] == SCHEMA_VERSION
        kind = line["event"]
        if kind not in plugin_kinds:
            assert kind in REGISTRY, line
            assert set(REGISTRY[kind].fields) <= set(line), line
    return lines


def checks_by_name(stdout: str) -> dict[str, dict[str, Any]]:
    """doctor --json's checks by name (the last one of a name wins)."""
    return {check["name"]: check for check in conforming("doctor --json", stdout)["checks"]}
