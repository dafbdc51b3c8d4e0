"""`[agent] confine = "workdir"` through a real serve, as root and as a user's supervisor.

A fake agent tries to write where a runaway agent does damage and where its round needs to
write. Everything it is denied it could write with confinement off (the control run below),
so it is Landlock, not ordinary permissions, that refuses it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import AGENTS
from tests.security.conftest import Served, require_landlock

LINE = "written by a confined agent"


@pytest.fixture
def landlock() -> None:
    require_landlock("no Landlock in this kernel: nothing confines the agent")


class Layout:
    """The operator's files around one project, owned by the supervisor's uid."""

    def __init__(self, served: Served) -> None:
        project = served.project
        self.root = project.root
        self.home = self.root / "home"
        self.keys = self.home / ".ssh" / "authorized_keys"
        self.profile = self.home / ".profile"
        self.sibling = self.root / "other-project" / "main.py"
        self.etc = Path(f"/etc/agent-runner-test-{os.getpid()}")
        # The config outside the work tree, as the operator keeps it to protect it.
        project.config_path = self.root / "agent-runner.toml"
        for path, text in [
            (self.keys, "ssh-ed25519 AAAA operator\n"),
            (self.profile, "export EDITOR=vi\n"),
            (self.sibling, "print('other project')\n"),
        ]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.work = project.work_dir
        self.log_dir = project.log_dir

    def harmful(self) -> list[list[str]]:
        """Writes a runaway agent does damage with, each allowed by ordinary permissions."""
        return [
            ["ssh", "append", str(self.keys), ""],
            ["profile", "remove", str(self.profile), ""],
            ["sibling", "append", str(self.sibling), ""],
            ["state", "append", str(self.log_dir / "state.json"), ""],
            ["config", "append", str(self.root / "agent-runner.toml"), ""],
            ["hardlink", "link", str(self.keys), str(self.work / "keys-link")],
            ["symlink", "symlink", str(self.keys), str(self.work / "keys-symlink")],
        ]

    def needed(self) -> list[list[str]]:
        """Writes the round needs, and two that only root could otherwise make."""
        return [
            ["work", "append", str(self.work / "notes.txt"), ""],
            ["tmpdir", "append", "$TMPDIR/scratch", ""],
            ["tmpdir_locked", "locked_folder", "$TMPDIR/locked", ""],
            ["state_folder", "append", str(self.home / ".claude" / "session.json"), ""],
            ["dev_null", "append", "/dev/null", ""],
            ["etc", "append", str(self.etc), ""],
            ["block_device", "mknod", str(self.work / "disk"), ""],
        ]

    def untouched(self) -> bool:
        texts = [self.keys.read_text(), self.sibling.read_text()]
        texts += [
            (self.log_dir / "state.json").read_text(),
            (self.root / "agent-runner.toml").read_text(),
        ]
        return all(LINE not in text for text in texts) and self.profile.exists()


def run_agent(
    served: Served, layout: Layout, confine: str, writes: list[list[str]]
) -> dict[str, Any]:
    """One round of the fake agent under `confine`; what it printed."""
    project = served.project
    project.write_config(
        [sys.executable, str(AGENTS / "tries_writes.py"), json.dumps(writes)],
        agent={
            "preset": "claude",
            "parser": "none",
            "confine": confine,
            "env": {"HOME": str(layout.home)},
        },
        prompt={"files": [str(project.work_dir / "prompts" / "main.md")]},
        runtime={"work_dir": str(project.work_dir)},
        vcs={"dirty_action": "ignore"},
    )
    if served.mode != "root":
        served.own(layout.root)
    site = layout.root / "site"
    site.mkdir(exist_ok=True)
    served.run(site, "--once")
    transcript = (project.log_dir / "rounds" / "round-000001.log").read_text()
    assert transcript, [e for e in project.events() if e["event"] in ("agent_spawn", "agent_exit")]
    return json.loads(transcript.splitlines()[-1])


def test_a_confined_agent_writes_only_where_its_round_needs(served: Served, landlock: None) -> None:
    layout = Layout(served)
    report = run_agent(served, layout, "workdir", layout.harmful() + layout.needed())
    outcomes = report["outcomes"]
    assert outcomes == {
        "ssh": "EACCES",
        "profile": "EACCES",
        "sibling": "EACCES",
        "state": "EACCES",
        "config": "EACCES",
        "hardlink": "EXDEV",  # a link would make the key file writable through the work tree
        "symlink": "EACCES",
        "work": "ok",
        "tmpdir": "ok",
        "tmpdir_locked": "ok",
        "state_folder": "ok",
        "dev_null": "ok",
        "etc": "EACCES",
        # Root could make a device node and write the disk through it: Landlock refuses it.
        "block_device": "EACCES",
    }
    assert layout.untouched()
    assert not layout.etc.exists()
    # Confinement keeps the supervisor's uid for the agent: root stays root.
    assert report["uid"] == served.uid
    assert LINE in (layout.work / "notes.txt").read_text()
    assert LINE in (layout.home / ".claude" / "session.json").read_text()
    # Its TMPDIR was its round's own, and is gone with the round, a folder left mode 000 too.
    tmpdir = Path(report["tmpdir"])
    assert tmpdir == layout.log_dir / "agent-tmp" / "round-000001"
    assert not tmpdir.exists()
    (spawn,) = served.project.events("agent_spawn")
    assert spawn["confined"] is True and spawn["landlock_abi"] >= 1
    (prepared,) = served.project.events("agent_confinement_prepared")
    assert f"{layout.home / '.claude.json'}: does not exist" in prepared["skipped"]


def test_without_confinement_the_same_agent_could_do_all_of_it(served: Served) -> None:
    layout = Layout(served)
    outcomes = run_agent(served, layout, "off", layout.harmful())["outcomes"]
    assert set(outcomes.values()) == {"ok"}, outcomes
    assert not layout.untouched()
    (spawn,) = served.project.events("agent_spawn")
    assert spawn["confined"] is False and spawn["landlock_abi"] is None
