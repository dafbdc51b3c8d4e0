"""Every flag a preset passes is one the recorded CLI version's own --help lists."""

from __future__ import annotations

import json
import re

import pytest

from agent_runner.config import load_preset
from tests.real_transcripts import CLIS, REAL


def recorded_help(cli: str) -> tuple[list[str], str]:
    """(the help command, its text) of every recorded version of `cli`."""
    folders = sorted(p for p in REAL.glob(f"{cli}-*") if (p / "cli.json").exists())
    assert folders, f"no recording of {cli}: run make record"
    info = json.loads((folders[-1] / "cli.json").read_text())
    return info["help_command"], (folders[-1] / "help.txt").read_text()


@pytest.mark.parametrize("cli", CLIS)
def test_every_preset_flag_appears_in_the_recorded_help(cli: str) -> None:
    command = load_preset(cli)["command"]
    help_command, text = recorded_help(cli)
    # The help is of the command the preset runs: `codex exec --help` for `codex exec …`.
    assert command[: len(help_command) - 1] == help_command[:-1]
    assert any(arg.startswith("-") for arg in command)
    assert missing_flags(command, text) == []


def missing_flags(command: list[str], text: str) -> list[str]:
    flags = [arg for arg in command if arg.startswith("-") and arg != "-"]
    return [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text)]


def test_a_flag_missing_from_the_help_is_reported() -> None:
    _, text = recorded_help("codex")
    # codex 0.171 dropped --full-auto; a prefix of a real flag is no match either.
    command = ["codex", "exec", "--json", "--full-auto", "--sandbox", "--skip-git"]
    assert missing_flags(command, text) == ["--full-auto", "--skip-git"]
