"""examples/office-hours built into a wheel, installed, pinned, and run by a real serve.

Each of its three hooks works through the real loop with a fake Claude agent: the spawn
hook defers outside its hours, the dirty handler commits docs only, the observer counts tool
calls and turns the CLI's overload line into a back-off.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from agent_runner.supervisor.loop.state import read_state
from tests.conftest import PluginInstalls
from tests.integration.conftest import Project, agent, git
from tests.pluginrun import cli, listed, peek, pin, serve_once, start_serve

EXAMPLE = "office-hours"


@pytest.fixture
def site(project: Project, plugin_installs: PluginInstalls) -> Path:
    return plugin_installs.site(project.root / "site", EXAMPLE)


def hours_around_now(inside: bool) -> dict[str, Any]:
    """Office hours (UTC) that hold now with an hour to spare, or that start in 3 hours."""
    hour = time.gmtime().tm_hour
    if inside:
        return {"start_hour": (hour - 1) % 24, "end_hour": (hour + 2) % 24, "timezone": "UTC"}
    return {"start_hour": (hour + 3) % 24, "end_hour": (hour + 4) % 24, "timezone": "UTC"}


def configure(
    project: Project,
    site: Path,
    command: list[str],
    *,
    inside: bool = True,
    allow: bool = True,
    plugins: dict[str, Any] | None = None,
    **tables: dict[str, Any],
) -> str:
    """The example pinned under sandbox = "require", its dirty handler chosen; the digest."""
    project.write_config(command)
    digest = pin(project, site, "office_hours")
    project.write_config(
        command,
        vcs={"dirty_handler": "office_hours", **tables.pop("vcs", {})},
        plugins={
            "sandbox": "require",
            "pin": {"office_hours": digest},
            "spawn_override_allow": ["office_hours"] if allow else [],
            "settings": {"office_hours": hours_around_now(inside)},
            **(plugins or {}),
        },
        **tables,
    )
    return digest


def claude(*args: str) -> list[str]:
    return agent("claude_stream.py", *args)


def test_all_three_hooks_run_in_one_round(project: Project, site: Path) -> None:
    command = claude("--tool-calls", "3", "--write", "docs/guide.md", "--write", "src/app.py")
    digest = configure(project, site, command, vcs={"dirty_action": "ignore"})
    serve_once(project, before=(site,))
    (admitted,) = project.events("plugin_admitted")
    assert (admitted["name"], admitted["pin"], admitted["tier"]) == ("office_hours", digest, "full")
    assert admitted["families"] == {
        "spawn": ["within_office_hours"],
        "dirty": ["commit_docs_only"],
        "observe": ["count_tool_calls"],
    }
    # Inside its hours the spawn hook says proceed: no decision event, the agent ran.
    assert not project.events("plugin_spawn_decision")
    assert len(project.events("agent_spawn")) == 1
    # The dirty handler decided (not dirty_action = "ignore"): docs committed, the rest stashed.
    (committed,) = project.events("dirty_auto_committed")
    assert committed["files"] == ["docs/guide.md"]
    assert git(project.work_dir, "show", "--name-only", "--format=%s", "HEAD").split() == [
        "docs",
        "from",
        "round",
        "1",
        "docs/guide.md",
    ]
    (stashed,) = project.events("orphan_stashed")
    assert git(project.work_dir, "show", f"{stashed['ref']}:src/app.py") == "written in round 1\n"
    assert git(project.work_dir, "status", "--porcelain") == ""
    assert not project.events("dirty_ignored")
    # The observer's event, written under the plugin's name.
    (counted,) = project.events("office_hours.tool_calls")
    assert (counted["round"], counted["count"]) == (1, 3)
    assert not project.events("hook_failed")
    (row,) = [r for r in peek(project, site)["plugins"]["entries"] if r["name"] == "office_hours"]
    assert (row["state"], row["failures"], row["pin_state"]) == ("admitted", 0, "verified")


def test_a_round_that_changed_no_docs_is_stashed_whole(project: Project, site: Path) -> None:
    configure(project, site, claude("--write", "src/app.py"))
    serve_once(project, before=(site,))
    assert not project.events("dirty_auto_committed")
    (stashed,) = project.events("orphan_stashed")
    message = git(project.work_dir, "log", "-1", "--format=%s", stashed["ref"])
    assert "office_hours: round 1 changed no docs/" in message


def test_outside_its_hours_the_next_round_is_deferred_and_peek_says_so(
    project: Project, site: Path
) -> None:
    configure(project, site, claude(), inside=False, plugins={"max_defer_s": 1})
    serve = start_serve(project, site=site)
    project.wait_for("round_deferred", count=2)
    state = peek(project, site)
    assert state["supervisor"]["state"] == "deferred"
    deferred = state["deferred"]
    assert deferred["action"] == "defer"
    assert deferred["hook"] == "office_hours:within_office_hours"
    assert deferred["reason"].startswith("outside office hours")
    assert 0 <= deferred["remaining_s"] <= 1
    text = cli(project, "peek", before=(site,)).stdout
    assert "deferred    defer by office_hours:within_office_hours" in text
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=10) == 0
    decisions = project.events("plugin_spawn_decision")
    assert decisions
    assert all(
        (d["hook"], d["action"], d["defer_s"]) == ("office_hours:within_office_hours", "defer", 1)
        for d in decisions
    )
    # Each defer asked again after its wait, and no agent ever started.
    deferred_events = project.events("round_deferred")
    assert len(decisions) == len(deferred_events) >= 2
    assert {e["round"] for e in deferred_events} == {1}
    assert not project.events("agent_spawn")


def test_a_defer_from_a_plugin_not_allowed_to_is_ignored(project: Project, site: Path) -> None:
    configure(project, site, claude(), inside=False, allow=False)
    serve_once(project, before=(site,))
    (ignored,) = project.events("plugin_spawn_override_ignored")
    assert ignored == {
        "ts": ignored["ts"],
        "event": "plugin_spawn_override_ignored",
        "hook": "office_hours:within_office_hours",
        "action": "defer",
    }
    assert not project.events("round_deferred")
    assert len(project.events("agent_spawn")) == 1


def test_the_observer_turns_an_overload_into_a_back_off(project: Project, site: Path) -> None:
    """With parser = "none" the observer is the only one reading the transcript."""
    configure(
        project,
        site,
        claude("--tool-calls", "1", "--overloaded"),
        agent={"parser": "none"},
        backoff={"estimated_base_s": 1},
    )
    done = cli(project, "serve", "--max-rounds", "2", before=(site,))
    assert done.returncode == 0, done.stderr
    detected = project.events("transient_error_detected")
    assert [(e["round"], e["classification"], e["reset_at"], e["detail"]) for e in detected] == [
        (1, "api_transient_5xx", None, "reported by office_hours:count_tool_calls"),
        (2, "api_transient_5xx", None, "reported by office_hours:count_tool_calls"),
    ]
    (wait,) = project.events("backoff_wait")
    assert (wait["classification"], wait["source"]) == ("api_transient_5xx", "estimated")
    kinds = [e["event"] for e in project.events()]
    first_end = kinds.index("round_end")
    assert kinds.index("backoff_wait") > first_end
    assert kinds.index("round_start", first_end) > kinds.index("backoff_wait")
    # The second transient doubles the ladder: 2 s, kept in state.json for the next serve.
    loop = read_state(project.log_dir)["loop"]
    assert loop["transient_streaks"] == {"api_transient_5xx": 2}
    assert loop["backoff_class"] == "api_transient_5xx"
    # One fork server served both rounds: the rounds' stray sweeps spare it.
    assert not project.events("sandbox_server_restarted")


def test_the_parsers_finding_stands_over_the_observers(project: Project, site: Path) -> None:
    """parser = "claude" reads the same overload: one finding, the parser's own."""
    configure(project, site, claude("--overloaded"))
    serve_once(project, before=(site,))
    (detected,) = project.events("transient_error_detected")
    assert detected["classification"] == "api_transient_5xx"
    assert not detected["detail"].startswith("reported by")


def test_plugins_list_shows_the_example_as_serve_admitted_it(project: Project, site: Path) -> None:
    digest = configure(project, site, claude())
    serve_once(project, before=(site,))
    row = listed(project, site)["office_hours"]
    assert (row["dist"], row["version"], row["pin_state"], row["digest"]) == (
        "agent-runner-office-hours",
        "1.0.0",
        "verified",
        digest,
    )
    assert (row["state"], row["failures"]) == ("admitted", 0)


EXAMPLE_DIR = Path(__file__).parents[2] / "examples" / EXAMPLE
DOCS = Path(__file__).parents[2] / "docs" / "plugins.md"


@pytest.mark.parametrize(
    "name",
    [
        "pyproject.toml",
        "office_hours/__init__.py",
        "office_hours/hours.py",
        "office_hours/transcript.py",
    ],
)
def test_the_worked_example_in_the_docs_is_the_tested_plugin(name: str) -> None:
    section = DOCS.read_text().split(f"`examples/office-hours/{name}`", 1)[1]
    fenced = section.split("```", 2)[1]
    assert fenced.split("\n", 1)[1] == (EXAMPLE_DIR / name).read_text()
