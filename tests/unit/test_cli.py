"""The CLI in-process: help, version, init for every preset, and config errors as exit 78."""

from __future__ import annotations

import copy
import json
import math
import string
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_runner import __version__
from agent_runner.cli import run
from agent_runner.config import SCHEMA, TOP_LEVEL, load_config, preset_names
from agent_runner.errors import ExitCode


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("init", "serve", "round", "peek", "doctor", "events", "status", "stop", "demo"):
        assert f"  {command} " in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["serve", "--bogus"]) == 2
    assert "No such option" in capsys.readouterr().err


PRESETS = ["claude", "codex", "gemini", "aider", "opencode", "qwen", "copilot", "generic", "demo"]


@pytest.mark.parametrize("preset", PRESETS)
def test_init_writes_a_config_that_loads(tmp_path: Path, preset: str) -> None:
    target = tmp_path / "agent-runner.toml"
    assert run(["init", "--preset", preset, "--config", str(target)]) == 0
    config = load_config(target)
    assert config.agent.preset == preset
    assert (tmp_path / "prompts" / "main.md").read_text().strip()


def test_every_shipped_preset_is_tested() -> None:
    assert set(preset_names()) == set(PRESETS)


def test_init_refuses_to_overwrite_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "agent-runner.toml"
    target.write_text("keep me")
    assert run(["init", "--config", str(target)]) == 78
    assert "already exists (use --force to overwrite)" in capsys.readouterr().err
    assert target.read_text() == "keep me"
    assert run(["init", "--force", "--config", str(target)]) == 0
    assert load_config(target).agent.preset == "claude"


def test_init_rejects_an_unknown_preset_with_exit_2_and_the_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["init", "--preset", "cursor", "--config", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err
    known = ", ".join(f"'{name}'" for name in sorted(PRESETS))
    assert f"'cursor' is not one of {known}" in err
    assert not (tmp_path / "x.toml").exists()


VALID: dict[str, Any] = {
    "schema_version": 1,
    "agent": {"command": ["true"], "parser": "none"},
}
NUMERIC = [
    (table, name, key)
    for table, keys in SCHEMA.items()
    for name, key in keys.items()
    if key.kind in ("int", "number")
]
STRINGS = [
    (table, name)
    for table, keys in SCHEMA.items()
    for name, key in keys.items()
    if key.kind == "str"
]
CHOICES = [
    (table, name) for table, keys in SCHEMA.items() for name, key in keys.items() if key.choices
]
WORDS = st.text(string.ascii_lowercase + "_", min_size=1, max_size=12)
# NUL is its own error; a lone surrogate cannot even be written to a TOML file.
TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=8)


@st.composite
def broken_documents(draw: st.DrawFn) -> tuple[dict[str, Any], str, str]:
    """A valid document with exactly one thing wrong: (document, where, what the error says)."""
    document = copy.deepcopy(VALID)
    mistake = draw(
        st.sampled_from(
            ["table", "key", "type", "low", "high", "version", "no_version", "nul", "choice"]
        )
    )
    if mistake == "table":
        name = draw(WORDS.filter(lambda w: w not in TOP_LEVEL))
        document[name] = {}
        return document, name, "unknown table"
    if mistake == "key":
        table = draw(st.sampled_from(sorted(SCHEMA)))
        name = draw(WORDS.filter(lambda w, t=table: w not in SCHEMA[t]))
        document.setdefault(table, {})[name] = 1
        return document, f"{table}.{name}", "unknown key"
    if mistake in ("type", "low", "high"):
        table, name, key = draw(st.sampled_from(NUMERIC))
        if mistake == "type":
            value: Any = draw(st.one_of(TEXT, st.booleans(), st.lists(st.integers())))
            said = "must be an integer" if key.kind == "int" else "must be a number"
        elif mistake == "low":
            assert key.low is not None
            value = draw(st.integers(max_value=math.ceil(key.low) - 1))
            said = "must be at least"
        else:
            assert key.high is not None
            value = draw(st.integers(min_value=math.floor(key.high) + 1, max_value=2**63 - 1))
            said = "must be at most"
        document.setdefault(table, {})[name] = value
        return document, f"{table}.{name}", said
    if mistake == "version":
        document["schema_version"] = draw(st.integers().filter(lambda v: v != 1))
        return document, "schema_version", "must be 1"
    if mistake == "no_version":
        del document["schema_version"]
        return document, "schema_version", "required"
    if mistake == "nul":
        table, name = draw(st.sampled_from(STRINGS))
        document.setdefault(table, {})[name] = draw(st.text(max_size=4)) + "\0"
        return document, f"{table}.{name}", "must not contain a NUL character"
    table, name = draw(st.sampled_from(CHOICES))
    document.setdefault(table, {})[name] = draw(
        TEXT.filter(lambda v, c=SCHEMA[table][name].choices: v not in c)
    )
    return document, f"{table}.{name}", "must be one of"


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(broken_documents())
def test_any_malformed_config_exits_78_with_one_line_naming_the_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    broken: tuple[dict[str, Any], str, str],
) -> None:
    document, where, said = broken
    path = tmp_path / "agent-runner.toml"
    path.write_text(tomli_w.dumps(document))
    assert run(["status", "--config", str(path)]) == 78
    captured = capsys.readouterr()
    assert captured.err.startswith(f"agent-runner: {path}: {where}: "), captured.err
    assert said in captured.err
    assert captured.err.count("\n") == 1, captured.err


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            f"{table}.{name}": (
                st.integers(min_value=math.ceil(key.low), max_value=math.floor(key.high))
                if key.kind == "int"
                else st.floats(min_value=key.low, max_value=key.high)
            )
            for table, name, key in NUMERIC
            if key.low is not None and key.high is not None
        },
    )
)
def test_any_config_within_the_bounds_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], values: dict[str, Any]
) -> None:
    document = copy.deepcopy(VALID)
    for dotted, value in values.items():
        table, name = dotted.split(".")
        document.setdefault(table, {})[name] = value
    runtime = document.setdefault("runtime", {})
    # The two cross-key rules: a ceiling is never below its base.
    runtime["max_restart_delay_s"] = max(
        runtime.get("max_restart_delay_s", 600), runtime.get("restart_delay_s", 5)
    )
    backoff = document.setdefault("backoff", {})
    backoff["estimated_max_s"] = max(
        backoff.get("estimated_max_s", 1800), backoff.get("estimated_base_s", 60)
    )
    path = tmp_path / "agent-runner.toml"
    path.write_text(tomli_w.dumps(document))
    code = run(["status", "--json", "--config", str(path)])
    captured = capsys.readouterr()
    assert code == ExitCode.NOT_RUNNING, captured.err
    assert json.loads(captured.out)["supervisor"]["state"] == "stopped"


def test_init_force_never_overwrites_an_existing_prompt(tmp_path: Path) -> None:
    target = tmp_path / "agent-runner.toml"
    assert run(["init", "--config", str(target)]) == 0
    prompt = tmp_path / "prompts" / "main.md"
    prompt.write_text("my carefully written prompt\n")
    assert run(["init", "--force", "--preset", "codex", "--config", str(target)]) == 0
    assert prompt.read_text() == "my carefully written prompt\n"
    assert load_config(target).agent.preset == "codex"
