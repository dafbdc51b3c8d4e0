"""The CLI in-process: help, version, init for every preset, and config errors as exit 78."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_runner import __version__
from agent_runner.cli import run
from agent_runner.config import SCHEMA, load_config, preset_names


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


@pytest.mark.parametrize("preset", ["claude", "codex", "gemini", "aider", "demo"])
def test_init_writes_a_config_that_loads(tmp_path: Path, preset: str) -> None:
    target = tmp_path / "agent-runner.toml"
    assert run(["init", "--preset", preset, "--config", str(target)]) == 0
    config = load_config(target)
    assert config.agent.preset == preset
    assert (tmp_path / "prompts" / "main.md").read_text().strip()


def test_every_shipped_preset_is_tested() -> None:
    assert set(preset_names()) == {"claude", "codex", "gemini", "aider", "demo"}


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


def test_init_rejects_an_unknown_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["init", "--preset", "cursor", "--config", str(tmp_path / "x.toml")]) == 78
    assert "unknown preset 'cursor'" in capsys.readouterr().err


scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(string.printable + "\0\u00e9", max_size=20),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=8), scalars, max_size=3),
)
tables = st.sampled_from(sorted(SCHEMA))


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if draw(st.booleans()):
        document["schema_version"] = draw(st.one_of(st.just(1), scalars))
    for table in draw(st.lists(tables, max_size=4, unique=True)):
        keys = draw(
            st.lists(st.sampled_from([*SCHEMA[table], "bogus_key"]), max_size=4, unique=True)
        )
        document[table] = {key: draw(values) for key in keys}
    if draw(st.booleans()):
        document[draw(st.text(string.ascii_lowercase, min_size=1, max_size=8))] = draw(values)
    return document


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(documents())
def test_any_malformed_config_exits_78_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, Any]
) -> None:
    path = tmp_path / "agent-runner.toml"
    path.write_text(tomli_w.dumps(document))
    code = run(["status", "--config", str(path)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if code != 0:
        assert code == 78, captured.err
        assert captured.err.count("\n") == 1, captured.err
        assert captured.err.startswith(f"agent-runner: {path}: ")


def test_init_force_never_overwrites_an_existing_prompt(tmp_path: Path) -> None:
    target = tmp_path / "agent-runner.toml"
    assert run(["init", "--config", str(target)]) == 0
    prompt = tmp_path / "prompts" / "main.md"
    prompt.write_text("my carefully written prompt\n")
    assert run(["init", "--force", "--preset", "codex", "--config", str(target)]) == 0
    assert prompt.read_text() == "my carefully written prompt\n"
    assert load_config(target).agent.preset == "codex"
