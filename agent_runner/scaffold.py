"""`agent-runner init`: write a starter `agent-runner.toml` (tomli-w) and `prompts/main.md`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

from agent_runner.config import SCHEMA_VERSION, load_config
from agent_runner.errors import ConfigError
from agent_runner.files import write_atomic
from agent_runner.presets import preset_names

STARTER_PROMPT = """\
You are working unattended in this git repository, supervised by agent-runner.

Pick the next most useful small task, do it, run the tests, and commit your work with a
clear message. If everything is done, say so and exit.
"""


# `generic` names no CLI: a command to replace and patterns to adapt (docs/agents.md, "generic").
GENERIC_STARTER: dict[str, Any] = {
    "command": ["my-agent"],
    "patterns": {
        "rate_limit": (
            r"(?i)\b(?:429|rate limit(?:ed)?)\b.*?\b(?:retry|try again) (?:after|in)"
            r" (?P<reset>\d+(?:\.\d+)?\s*(?:ms|s|m|h)?)"
        ),
        "auth": r"(?i)\b(?:401|unauthorized|invalid api key)\b",
    },
}


def starter_document(preset: str) -> dict[str, Any]:
    """The config `init` writes: the preset plus the settings an operator edits first."""
    agent: dict[str, Any] = {"preset": preset}
    if preset == "generic":
        agent.update(GENERIC_STARTER)
    return {
        "schema_version": SCHEMA_VERSION,
        "agent": agent,
        "prompt": {"files": ["prompts/main.md"]},
        "runtime": {
            "work_dir": ".",
            "round_budget_s": 3600,
            "restart_delay_s": 5,
            "max_restart_delay_s": 600,
            "max_rounds": 0,
            "stop_mode": "terminate",
        },
        "vcs": {"dirty_action": "stash"},
        "plugins": {"sandbox": "prefer"},
    }


def write_project(config_path: Path, *, preset: str, force: bool, **runtime: Any) -> list[Path]:
    """Write the config and the starter prompt; refuse to overwrite without `force`."""
    if preset not in preset_names():
        raise ConfigError(f"unknown preset {preset!r}; known: {', '.join(preset_names())}")
    if config_path.exists() and not force:
        raise ConfigError(f"{config_path}: already exists (use --force to overwrite)")
    if config_path.is_dir():
        raise ConfigError(f"{config_path}: is a directory; name the file to write")
    document = starter_document(preset)
    document["runtime"].update(runtime)
    written = [config_path]
    config_path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh O_EXCL temporary file: nothing planted at a temporary name is written through.
    write_atomic(config_path, tomli_w.dumps(document).encode(), mode=0o644)
    prompt = config_path.parent / "prompts" / "main.md"
    # --force replaces the config only: a prompt is the operator's work, never overwritten.
    if not prompt.exists():
        prompt.parent.mkdir(parents=True, exist_ok=True)
        prompt.write_text(STARTER_PROMPT, encoding="utf-8")
        written.append(prompt)
    load_config(config_path)  # what init writes must load
    return written
