"""Round observers and plugin settings through a real serve, with real installed plugins.

What an observer writes into the log, and how its transient meets the parser's in the
back-off; settings that reach a plugin, or reach nothing and are said to.
"""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

from agent_runner.supervisor.loop.state import read_state
from tests.conftest import PluginInstalls
from tests.integration.conftest import Project, agent
from tests.pluginrun import cli, fork_servers, serve_once, start_serve


def configure(project: Project, command: list[str], report: dict[str, Any], **tables: Any) -> None:
    project.write_config(
        command,
        plugins={"sandbox": "prefer", "settings": {"observer_plugin": report}},
        **tables,
    )


def test_observer_events_are_written_under_its_name_and_undeclared_ones_dropped(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "observer_plugin")
    events = [
        ["noted", {"files": ["a.py"], "nested": {"depth": [1, 2.5, True]}}],
        ["sneaky", {"x": 1}],
        ["noted", {"ts": "1999-12-31T23:59:59.000Z"}],
    ]
    configure(project, agent("exits_with.py", "0"), {"events": events})
    serve_once(project, before=(site,))
    (noted,) = project.events("observer_plugin.noted")
    assert noted["files"] == ["a.py"]
    assert noted["nested"] == {"depth": [1, 2.5, True]}
    assert not project.events("observer_plugin.sneaky")
    (failed,) = project.events("hook_failed")
    assert (failed["hook"], failed["plugin"], failed["cause"]) == (
        "observer_plugin:report",
        "observer_plugin",
        "invalid_result",
    )
    assert "event kind 'sneaky' is not declared" in failed["detail"]
    assert "event field 'ts' is reserved" in failed["detail"]
    assert project.events("round_end")


def test_more_than_100_events_in_one_call_is_an_invalid_result(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "observer_plugin")
    configure(
        project, agent("exits_with.py", "0"), {"events": [["noted", {"n": n}] for n in range(101)]}
    )
    serve_once(project, before=(site,))
    assert not project.events("observer_plugin.noted")
    (failed,) = project.events("hook_failed")
    assert failed["cause"] == "invalid_result"
    assert "events must be a list of at most 100" in failed["detail"]


def test_an_observers_server_reset_is_obeyed(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "observer_plugin")
    report = {"classification": "rate_limit_account", "reset_in_s": 600}
    configure(project, agent("exits_with.py", "1"), report, agent={"parser": "none"})
    before = time.time()
    serve_once(project, before=(site,))
    (detected,) = project.events("transient_error_detected")
    assert detected["classification"] == "rate_limit_account"
    assert detected["detail"] == "reported by observer_plugin:report"
    loop = read_state(project.log_dir)["loop"]
    assert loop["backoff_source"] == "server"
    # The reset as reported, plus at most 5 s of jitter; never the estimated ladder's 60 s.
    assert before + 600 <= loop["backoff_until"] <= time.time() + 605
    assert read_state(project.log_dir)["last_round"]["transient"] == "rate_limit_account"


def test_an_observer_cannot_shorten_the_parsers_wait(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "observer_plugin")
    report = {"classification": "rate_limit_account", "reset_in_s": 1}
    configure(project, agent("claude_stream.py", "--limited-for", "3600"), report)
    before = time.time()
    serve_once(project, before=(site,))
    (detected,) = project.events("transient_error_detected")
    assert not detected["detail"].startswith("reported by")
    assert detected["reset_at"] >= before + 3598
    loop = read_state(project.log_dir)["loop"]
    assert loop["backoff_source"] == "server"
    assert loop["backoff_until"] >= before + 3598
    assert not project.events("hook_failed")


def test_an_unknown_transient_class_is_an_invalid_result_and_no_back_off(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "observer_plugin")
    configure(
        project,
        agent("exits_with.py", "1"),
        {"classification": "moon_phase"},
        agent={"parser": "none"},
    )
    serve_once(project, before=(site,))
    (failed,) = project.events("hook_failed")
    assert failed["detail"] == "unknown transient classification 'moon_phase'"
    assert not project.events("transient_error_detected")
    assert read_state(project.log_dir)["loop"]["backoff_until"] is None


def test_settings_for_a_plugin_that_is_not_admitted_are_warned_once(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "observer_plugin")
    project.write_config(
        agent("exits_with.py", "0"),
        plugins={
            "disable": ["observer_plugin"],
            "settings": {"observer_plugin": {"events": []}, "ghost": {"a": 1}},
        },
    )
    done = cli(project, "serve", "--max-rounds", "2", before=(site,))
    assert done.returncode == 0, done.stderr
    unused = project.events("plugin_settings_unused")
    assert sorted(e["name"] for e in unused) == ["ghost", "observer_plugin"]
    kinds = [e["event"] for e in project.events()]
    assert kinds.index("plugin_settings_unused") < kinds.index("round_start")


def test_a_settings_value_json_cannot_carry_is_a_one_line_config_error(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    text = project.config_path.read_text()
    project.config_path.write_text(text + "\n[plugins.settings.office_hours]\nopens = 09:00:00\n")
    done = cli(project, "serve", "--once")
    assert done.returncode == 78
    assert done.stderr.strip().endswith(
        "plugins.settings.office_hours.opens: a date or time cannot reach a plugin "
        "(its settings are JSON): use a string"
    )
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_spawn_hook_sees_the_round_redacted_argv_and_env_names_only(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "spawn_plugin")
    secret = "hunter2hunter2"
    project.write_config(
        ["sh", "-c", "exit 0", "sh", "--api-key", secret, f"--token={secret}", "--verbose"],
        agent={"prompt_delivery": "argv", "env": {"MY_SERVICE_TOKEN": secret}},
        plugins={
            "sandbox": "prefer",
            "quarantine_after": 100,
            "max_defer_s": 900,
            "settings": {
                "spawn_plugin": {
                    "enabled": ["report_view"],
                    "watch_env": ["MY_SERVICE_TOKEN", "AGENT_RUNNER_ROUND"],
                }
            },
        },
    )
    done = cli(project, "serve", "--max-rounds", "2", before=(site,))
    assert done.returncode == 0, done.stderr
    views = [
        json.loads(e["detail"].removeprefix("RuntimeError: "))
        for e in project.events("hook_failed")
    ]
    assert [v["round"] for v in views] == [1, 2]
    assert views[0]["last_round"] is None
    assert (views[1]["last_round"]["round"], views[1]["last_round"]["exit_cause"]) == (1, "clean")
    assert views[0]["argv"] == [
        "sh",
        "-c",
        "exit 0",
        "sh",
        "--api-key",
        "[REDACTED]",
        "--token=[REDACTED]",
        "--verbose",
        "<prompt>",
    ]
    # Names of what the agent gets, never their values.
    assert views[0]["env_names"] == ["AGENT_RUNNER_ROUND", "MY_SERVICE_TOKEN"]
    assert views[0]["max_defer_s"] == 900
    log = b"".join(path.read_bytes() for path in project.log_dir.glob("events-*.jsonl"))
    assert secret.encode() not in log


@pytest.mark.parametrize("installed", [(), ("observer_plugin",)])
def test_the_fork_server_runs_only_while_a_third_party_plugin_is_admitted(
    project: Project, plugin_installs: PluginInstalls, installed: tuple[str, ...]
) -> None:
    site = plugin_installs.site(project.root / "site", *installed)
    project.write_config(["sleep", "30"], plugins={"sandbox": "prefer"})
    serve = start_serve(project, "--once", site=site)
    project.wait_for("agent_spawn")
    servers = fork_servers(serve.pid)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=30) == 0
    assert len(servers) == len(installed)
    assert len(project.events("plugin_admitted")) == len(installed)


def test_a_stop_during_a_long_defer_ends_the_wait(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "office-hours")
    hour = time.gmtime().tm_hour
    project.write_config(
        agent("exits_with.py", "0"),
        plugins={
            "sandbox": "prefer",
            "spawn_override_allow": ["office_hours"],
            "settings": {
                "office_hours": {
                    "start_hour": (hour + 3) % 24,
                    "end_hour": (hour + 4) % 24,
                    "timezone": "UTC",
                }
            },
        },
    )
    serve = start_serve(project, site=site)
    deferred = project.wait_for("round_deferred")
    assert deferred["defer_s"] == 3600  # the default max_defer_s: hours ahead
    serve.send_signal(signal.SIGTERM)
    # Bounded by the test's own timeout, an hour short of the defer: the wait did end.
    assert serve.wait(timeout=30) == 0
    (stopped,) = project.events("serve_stop")
    assert stopped["reason"] == "stopped (SIGTERM)"
    assert not project.events("agent_spawn")


def test_no_observer_holds_up_a_stop(project: Project, plugin_installs: PluginInstalls) -> None:
    site = plugin_installs.site(project.root / "site", "observer_plugin")
    configure(project, ["sleep", "30"], {"events": [["noted", {"n": 1}]]})
    serve = start_serve(project, site=site)
    project.wait_for("agent_spawn")
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=30) == 0
    (ended,) = project.events("agent_exit")
    assert ended["exit_cause"] == "stopped"
    assert project.events("round_end")
    assert not project.events("observer_plugin.noted")
