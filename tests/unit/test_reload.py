"""Live edits of what the agent may write wait for a restart: an agent able to edit the
config must not widen its own confinement from the next round on."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from agent_runner.config import Config, load_config
from agent_runner.supervisor.loop import reload
from agent_runner.supervisor.loop.reload import ConfigWatcher
from tests.fakes import RecordedEvents


def write(path: Path, agent: str) -> None:
    path.write_text(
        f'schema_version = 1\n[agent]\ncommand = ["true"]\nparser = "none"\n{agent}'
        f'[prompt]\nfiles = ["{path.parent / "main.md"}"]\n'
        f'[runtime]\nlog_dir = "{path.parent / "logs"}"\n'
    )


def watched(tmp_path: Path, agent: str, events: RecordedEvents) -> tuple[Path, ConfigWatcher]:
    """A project's config written with `agent` lines, and a watcher started from it."""
    (tmp_path / "main.md").write_text("go\n")
    path = tmp_path / "agent-runner.toml"
    write(path, agent)
    return path, ConfigWatcher(load_config(path), events)


def test_confine_and_writable_edits_are_deferred_and_the_rest_applies(tmp_path: Path) -> None:
    events = RecordedEvents()
    path, watcher = watched(
        tmp_path, 'confine = "workdir-if-available"\nwritable = ["/srv/a"]\n', events
    )
    write(path, 'confine = "off"\nwritable = ["/"]\nsigterm_grace_s = 3\n')
    running = watcher.refresh()
    assert running.agent.confine == "workdir-if-available"
    assert [w.path for w in running.agent.writable] == [Path("/srv/a")]
    assert running.agent.sigterm_grace_s == 3
    (deferred,) = events.of("config_reload_deferred")
    assert deferred["changed"] == ["agent.confine", "agent.writable"]
    assert events.of("config_reloaded")[0]["changed"] == ["agent.sigterm_grace_s"]


def counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path the watcher parses, in order."""
    parsed: list[Path] = []

    def load(path: Path) -> Config:
        parsed.append(path)
        return load_config(path)

    monkeypatch.setattr(reload, "load_config", load)
    return parsed


def test_a_config_file_not_changed_since_it_was_parsed_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, watcher = watched(tmp_path, "sigterm_grace_s = 2\n", RecordedEvents())
    parsed = counting_loads(monkeypatch)
    later = time.time() + 2 * reload.RECENT_S
    # The file is old by now.
    monkeypatch.setattr(reload, "time", SimpleNamespace(time=lambda: later))
    for _ in range(3):
        assert watcher.refresh().agent.sigterm_grace_s == 2
    assert parsed == [path]
    # Rewritten in place, as long as before, its modification time put back: the change
    # time still moves (with a tick between the writes), and the new value applies.
    before = path.stat()
    time.sleep(0.05)
    write(path, "sigterm_grace_s = 3\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert watcher.refresh().agent.sigterm_grace_s == 3
    assert parsed == [path, path]
    # Replaced by a rename, as editors save: another inode.
    (tmp_path / "new.toml").write_text(path.read_text().replace("= 3", "= 4"))
    os.replace(tmp_path / "new.toml", path)
    assert watcher.refresh().agent.sigterm_grace_s == 4


def test_a_config_file_changed_in_the_last_second_is_parsed_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second change inside one tick of the file's clock could keep size, times and inode."""
    path, watcher = watched(tmp_path, "sigterm_grace_s = 2\n", RecordedEvents())
    parsed = counting_loads(monkeypatch)
    watcher.refresh()
    watcher.refresh()
    assert parsed == [path, path]


def test_a_config_that_parses_but_fails_its_checks_is_checked_again_each_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not parsing an unchanged file must not skip the checks: the fix may be outside it."""
    events = RecordedEvents()
    path, watcher = watched(tmp_path, "", events)
    path.write_text(path.read_text().replace('["true"]', '["./agent.sh"]'))
    later = time.time() + 2 * reload.RECENT_S
    monkeypatch.setattr(reload, "time", SimpleNamespace(time=lambda: later))
    assert watcher.refresh().agent.command == ("true",)
    assert len(events.of("config_reload_failed")) == 1
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    assert watcher.refresh().agent.command == ("./agent.sh",)
