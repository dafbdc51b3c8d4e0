"""Live edits of what the agent may write wait for a restart: an agent able to edit the
config must not widen its own confinement from the next round on."""

from __future__ import annotations

from pathlib import Path

from agent_runner.config import load_config
from agent_runner.supervisor.reload import ConfigWatcher
from tests.fakes import RecordedEvents


def write(path: Path, agent: str) -> None:
    path.write_text(
        f'schema_version = 1\n[agent]\ncommand = ["true"]\nparser = "none"\n{agent}'
        f'[prompt]\nfiles = ["{path.parent / "main.md"}"]\n'
        f'[runtime]\nlog_dir = "{path.parent / "logs"}"\n'
    )


def test_confine_and_writable_edits_are_deferred_and_the_rest_applies(tmp_path: Path) -> None:
    (tmp_path / "main.md").write_text("go\n")
    path = tmp_path / "agent-runner.toml"
    write(path, 'confine = "workdir-if-available"\nwritable = ["/srv/a"]\n')
    events = RecordedEvents()
    watcher = ConfigWatcher(load_config(path), events)
    write(path, 'confine = "off"\nwritable = ["/"]\nsigterm_grace_s = 3\n')
    running = watcher.refresh()
    assert running.agent.confine == "workdir-if-available"
    assert [w.path for w in running.agent.writable] == [Path("/srv/a")]
    assert running.agent.sigterm_grace_s == 3
    (deferred,) = events.of("config_reload_deferred")
    assert deferred["changed"] == ["agent.confine", "agent.writable"]
    assert events.of("config_reloaded")[0]["changed"] == ["agent.sigterm_grace_s"]
