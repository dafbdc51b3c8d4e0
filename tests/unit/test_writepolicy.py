"""Where a confined agent may write, and what `[agent] confine` means on a kernel (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_runner.config import Config, load_config
from agent_runner.supervisor.agent import landlock
from agent_runner.supervisor.agent.writepolicy import (
    DEVICES,
    exposed_inputs,
    granted_rights,
    round_tmpdir,
    verdict,
    write_rules,
)


def config_at(tmp_path: Path, *, config_in_work_tree: bool = False, extra: str = "") -> Config:
    work = tmp_path / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts" / "main.md").write_text("go\n")
    path = (work if config_in_work_tree else tmp_path) / "agent-runner.toml"
    path.write_text(
        'schema_version = 1\n[agent]\npreset = "codex"\nconfine = "workdir"\n'
        f'env = {{ HOME = "{tmp_path / "home"}" }}\n{extra}'
        f'[prompt]\nfiles = ["{work / "prompts" / "main.md"}"]\n'
        f'[runtime]\nwork_dir = "{work}"\nlog_dir = "{tmp_path / "logs"}"\n'
    )
    return load_config(path)


@pytest.mark.parametrize(
    ("mode", "abi", "action"),
    [
        ("off", 7, "unconfined"),
        ("off", 0, "unconfined"),
        ("workdir", 1, "confine"),
        ("workdir", 0, "refuse"),
        ("workdir-if-available", 3, "confine"),
        ("workdir-if-available", 0, "unconfined"),
    ],
)
def test_confine_mode_against_the_kernel(mode: str, abi: int, action: str) -> None:
    decided = verdict(mode, abi)
    assert decided.action == action
    assert ("Landlock" in decided.reason) == (abi == 0 and mode != "off")


def test_the_agent_writes_its_tree_transcripts_tmpdir_devices_and_state_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODEX_HOME", raising=False)
    config = config_at(tmp_path, extra='writable = ["/srv/cache/"]\n')
    rules = [(str(rule.path), rule.why, rule.create) for rule in write_rules(config)]
    assert rules == [
        (str(tmp_path / "work"), "work tree", False),
        (str(tmp_path / "logs" / "rounds"), "transcripts", True),
        (str(tmp_path / "logs" / "agent-tmp"), "TMPDIR", True),
        *((device, "device", False) for device in DEVICES),
        (str(tmp_path / "home" / ".codex"), "writable", True),
        ("/srv/cache", "writable", True),
    ]
    # Nothing of the log folder but its transcripts and the TMPDIRs: state.json stays ours.
    assert round_tmpdir(config.runtime.log_dir, 42).parent == tmp_path / "logs" / "agent-tmp"
    assert round_tmpdir(config.runtime.log_dir, 42).name == "round-000042"


@pytest.mark.parametrize("abi", range(1, 8))
def test_rules_never_grant_making_device_nodes(abi: int) -> None:
    rights = granted_rights(abi)
    assert rights & landlock.DEVICE_NODES == 0
    assert rights & (landlock.WRITE_FILE | landlock.MAKE_REG | landlock.REMOVE_FILE)
    assert bool(rights & landlock.REFER) == (abi >= 2)
    assert bool(rights & landlock.TRUNCATE) == (abi >= 3)
    # Handled but not granted: the ruleset still handles them, so they are refused.
    assert landlock.write_rights(abi) & landlock.DEVICE_NODES == landlock.DEVICE_NODES


def test_a_config_inside_the_work_tree_stays_writable_and_is_reported(tmp_path: Path) -> None:
    inside = config_at(tmp_path, config_in_work_tree=True)
    assert exposed_inputs(inside) == [inside.path]


def test_a_config_and_log_dir_beside_the_work_tree_are_not_exposed(tmp_path: Path) -> None:
    assert exposed_inputs(config_at(tmp_path)) == []
