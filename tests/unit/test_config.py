"""Strict config loading: defaults, every validation rule, one-line messages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent_runner.config import (
    SCHEMA,
    WritablePath,
    default_log_dir,
    find_config,
    load_config,
    read_prompt,
)
from agent_runner.errors import ConfigError, ExitCode

MINIMAL = 'schema_version = 1\n[agent]\ncommand = ["my-agent"]\nparser = "none"\n'


def write(tmp_path: Path, text: str, *, prompt: bool = True) -> Path:
    path = tmp_path / "agent-runner.toml"
    path.write_text(text, encoding="utf-8")
    if prompt:
        (tmp_path / "prompts").mkdir(exist_ok=True)
        (tmp_path / "prompts" / "main.md").write_text("do the work\n")
    return path


def error_of(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "agent-runner.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert caught.value.exit_code == ExitCode.CONFIG
    return message.removeprefix(f"{path}: ")


def test_minimal_config_gets_every_default(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    assert config.agent.command == ("my-agent",)
    assert config.agent.prompt_delivery == "stdin"
    assert config.agent.sigterm_grace_s == 10
    assert config.prompt.files == (tmp_path / "prompts" / "main.md",)
    assert config.runtime.work_dir == tmp_path
    assert config.runtime.log_dir == default_log_dir(tmp_path)
    assert config.runtime.stop_file == config.runtime.log_dir / "STOP"
    assert (config.runtime.round_budget_s, config.runtime.restart_delay_s) == (3600, 5)
    assert (config.runtime.max_restart_delay_s, config.runtime.max_rounds) == (600, 0)
    assert config.runtime.stop_mode == "terminate"
    assert config.breakers.crash_loop_rounds == 5
    assert config.breakers.stalled_rounds == 10
    assert config.breakers.auth_failed_rounds == 2
    assert (config.backoff.estimated_base_s, config.backoff.estimated_max_s) == (60, 1800)
    assert config.backoff.max_wait_s == 691_200
    assert (config.vcs.dirty_action, config.vcs.dirty_handler) == ("stash", "builtin")
    assert config.plugins.sandbox == "prefer"
    assert config.plugins.hook_timeout_s == 10
    assert config.plugins.quarantine_after == 3
    assert config.plugins.pin == {}


def test_full_config_loads_every_value(tmp_path: Path) -> None:
    pin = "sha256:" + "a" * 64
    text = f"""
schema_version = 1
[agent]
command = ["claude", "-p"]
prompt_delivery = "argv"
parser = "claude"
env = {{ A = "1" }}
sigterm_grace_s = 3
[prompt]
files = ["prompts/main.md", "prompts/extra.md"]
[runtime]
work_dir = "src"
log_dir = "/tmp/logs-x"
round_budget_s = 60
restart_delay_s = 0
max_restart_delay_s = 10
max_rounds = 7
stop_file = "STOPNOW"
stop_mode = "finish_round"
[breakers]
crash_loop_rounds = 2
crash_window_s = 5
stalled_rounds = 3
stall_window_s = 4
auth_failed_rounds = 1
[backoff]
estimated_base_s = 2
estimated_max_s = 20
max_wait_s = 100
[vcs]
dirty_action = "commit"
dirty_handler = "my_plugin"
stash_idempotency_s = 0
[plugins]
disable = ["bad"]
sandbox = "require"
spawn_override_allow = ["office:hours"]
hook_timeout_s = 5
max_defer_s = 60
quarantine_after = 2
[plugins.pin]
office = "{pin}"
[plugins.settings.office]
start_hour = 9
"""
    config = load_config(write(tmp_path, text))
    assert config.agent.env == {"A": "1"}
    assert config.prompt.files[1] == tmp_path / "prompts" / "extra.md"
    assert config.runtime.work_dir == tmp_path / "src"
    assert config.runtime.log_dir == Path("/tmp/logs-x")
    assert config.runtime.stop_file == tmp_path / "STOPNOW"
    assert config.runtime.stop_mode == "finish_round"
    assert config.vcs.dirty_handler == "my_plugin"
    assert config.plugins.pin == {"office": pin}
    assert config.plugins.settings == {"office": {"start_hour": 9}}
    assert config.plugins.spawn_override_allow == ("office:hours",)


def test_preset_fills_agent_and_explicit_keys_override(tmp_path: Path) -> None:
    text = 'schema_version = 1\n[agent]\npreset = "claude"\nprompt_delivery = "argv"\n'
    text += 'env = { EXTRA = "x" }\n'
    config = load_config(write(tmp_path, text))
    assert config.agent.command[0] == "claude"
    assert config.agent.parser == "claude"
    assert config.agent.prompt_delivery == "argv"
    assert config.agent.env["DISABLE_AUTOUPDATER"] == "1"
    assert config.agent.env["EXTRA"] == "x"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            MINIMAL + "[plugins]\nsandox = 'off'\n",
            "plugins.sandox: unknown key (did you mean 'sandbox'?)",
        ),
        (MINIMAL + "[plugin]\n", "plugin: unknown table (did you mean 'plugins'?)"),
        (
            MINIMAL + "[plugins]\ndisable = [true]\n",
            "plugins.disable[0]: must be a string, got a boolean",
        ),
        (
            MINIMAL + '[plugins.pin]\nx = "md5:abc"\n',
            'plugins.pin.x: must look like "sha256:<64 lowercase hex>"',
        ),
        (
            MINIMAL + '[plugins.pin]\nx = "sha256:' + "A" * 64 + '"\n',
            'plugins.pin.x: must look like "sha256:<64 lowercase hex>"',
        ),
        (
            MINIMAL + '[plugins.pin]\n"my plugin\\n" = "sha256:' + "a" * 64 + '"\n',
            'plugins.pin."my plugin\\n": not an entry-point name (letters, digits, _ . -)',
        ),
        (
            MINIMAL + "[runtime]\nround_budget_s = -5\n",
            "runtime.round_budget_s: must be at least 1, got -5",
        ),
        (
            MINIMAL + "[runtime]\nrestart_delay_s = -1\n",
            "runtime.restart_delay_s: must be at least 0, got -1",
        ),
        (
            MINIMAL + "[runtime]\nmax_rounds = 1.5\n",
            "runtime.max_rounds: must be an integer, got a number",
        ),
        (
            MINIMAL + "[runtime]\nround_budget_s = nan\n",
            "runtime.round_budget_s: must be a finite number, got nan",
        ),
        (
            MINIMAL + "[runtime]\nround_budget_s = true\n",
            "runtime.round_budget_s: must be a number, got a boolean",
        ),
        (
            MINIMAL + "[breakers]\ncrash_loop_rounds = 0\n",
            "breakers.crash_loop_rounds: must be at least 1, got 0",
        ),
        (
            MINIMAL + "[plugins]\nhook_timeout_s = 500\n",
            "plugins.hook_timeout_s: must be at most 120, got 500",
        ),
        (
            MINIMAL + "[runtime]\nstop_mode = 'kill'\n",
            "runtime.stop_mode: must be one of terminate, finish_round; got 'kill'",
        ),
        (
            MINIMAL + "[vcs]\ndirty_action = 'reset'\n",
            "vcs.dirty_action: must be one of stash, commit, ignore; got 'reset'",
        ),
        ("runtime = 3\n" + MINIMAL, "runtime: must be a table, got an integer"),
        (
            '[agent]\ncommand = ["x"]\nparser = "none"\n',
            "schema_version: required (set schema_version = 1)",
        ),
        ("schema_version = 2\n", "schema_version: must be 1, got 2"),
        ('schema_version = "1"\n', "schema_version: must be 1, got '1'"),
        ("schema_version = 1\n", "agent.command: required: a non-empty list (or set agent.preset)"),
        (
            'schema_version = 1\n[agent]\ncommand = []\nparser = "none"\n',
            "agent.command: required: a non-empty list (or set agent.preset)",
        ),
        (
            'schema_version = 1\n[agent]\ncommand = "claude"\n',
            "agent.command: must be a list of strings, got a string",
        ),
        (
            'schema_version = 1\n[agent]\ncommand = ["x"]\n',
            "agent.parser: required when no preset names one (e.g. 'none')",
        ),
        ('schema_version = 1\n[agent]\npreset = "claud"\n', "agent.preset: unknown preset 'claud'"),
        (MINIMAL + "[agent.env]\nA = 1\n", "agent.env.A: must be a string, got an integer"),
        (
            MINIMAL + "[runtime]\nrestart_delay_s = 100\nmax_restart_delay_s = 10\n",
            "runtime.max_restart_delay_s: must be at least restart_delay_s (100)",
        ),
        (MINIMAL + "[plugins.settings]\nx = 3\n", "plugins.settings.x: must be a table"),
        (
            MINIMAL + '[prompt]\nfiles = ["a\\u0000b"]\n',
            "prompt.files[0]: must not contain a NUL character",
        ),
        (
            MINIMAL + '[runtime]\nlog_dir = "/tmp/\\u0000"\n',
            "runtime.log_dir: must not contain a NUL character",
        ),
        (MINIMAL + "[prompt]\nfiles = []\n", "prompt.files: must name at least one prompt file"),
        (
            MINIMAL + '[agent.env]\n"A=B" = "1"\n',
            "agent.env.A=B: not a valid environment variable name",
        ),
        (
            MINIMAL + 'confine = "on"\n',
            "agent.confine: must be one of off, workdir, workdir-if-available; got 'on'",
        ),
        (
            MINIMAL + 'writable = ["~bob/.cache"]\n',
            "agent.writable[0]: only ~/ (the agent's HOME) may start a path",
        ),
        (MINIMAL + 'writable = ["$1X/"]\n', "agent.writable[0]: not a variable name: '$1X'"),
        (MINIMAL + 'writable = [""]\n', "agent.writable[0]: must not be empty"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert error_of(tmp_path, text).startswith(expected)


def test_writable_paths_are_the_presets_then_ours_in_the_agents_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CLAUDE_CONFIG_DIR", "AGENT_RUNNER_TEST_UNSET"):
        monkeypatch.delenv(name, raising=False)
    text = (
        'schema_version = 1\n[agent]\npreset = "claude"\n'
        'writable = ["~/.cache/tool/", "$DATA/out", "$AGENT_RUNNER_TEST_UNSET/x/", "build/",'
        ' "/srv/shared", "~/.claude.json"]\n'
        '[agent.env]\nHOME = "/home/op"\nDATA = "/data"\n'
    )
    config = load_config(write(tmp_path, text))
    assert config.agent.writable == (
        WritablePath(Path("/home/op/.claude"), create=True),
        WritablePath(Path("/home/op/.claude.json"), create=False),
        WritablePath(Path("/home/op/.cache/tool"), create=True),
        WritablePath(Path("/data/out"), create=False),
        WritablePath(tmp_path / "build", create=True),
        WritablePath(Path("/srv/shared"), create=False),
    )
    assert config.agent.confine == "off"


def test_non_toml_bytes_are_one_line(tmp_path: Path) -> None:
    assert error_of(tmp_path, b"\xff\xfe\x00garbage").startswith("not UTF-8 text")
    assert error_of(tmp_path, "schema_version = = 1").startswith("not valid TOML: ")


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent-runner\.toml: file not found$"):
        load_config(tmp_path / "agent-runner.toml")


def test_config_is_found_by_searching_upward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, MINIMAL)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert find_config() == path
    assert load_config().path == path


def test_no_config_anywhere_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no agent-runner\.toml here or in any parent folder"):
        find_config(tmp_path)


def test_default_log_dir_is_under_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    log_dir = default_log_dir(Path("/home/me/proj"))
    assert log_dir.parent == tmp_path / "state" / "agent-runner"
    assert re.fullmatch(r"proj-[0-9a-f]{8}", log_dir.name)


def test_prompt_files_are_concatenated_and_must_be_non_empty(tmp_path: Path) -> None:
    text = MINIMAL + '[prompt]\nfiles = ["prompts/main.md", "prompts/two.md"]\n'
    path = write(tmp_path, text)
    (tmp_path / "prompts" / "two.md").write_text("second")
    config = load_config(path)
    assert read_prompt(config) == b"do the work\n\nsecond\n"
    (tmp_path / "prompts" / "two.md").write_text("  \n")
    with pytest.raises(ConfigError, match=r"prompt\.files\[1\]: .*two\.md is empty"):
        read_prompt(config)
    (tmp_path / "prompts" / "two.md").unlink()
    with pytest.raises(ConfigError, match=r"prompt\.files\[1\]: cannot read"):
        read_prompt(config)


def test_schema_covers_every_table_of_the_spec() -> None:
    assert set(SCHEMA) == {
        *("agent", "prompt", "runtime", "breakers", "backoff", "vcs", "plugins"),
        *("budget", "notify"),  # SPEC §14
    }


def test_configuration_doc_is_generated_from_the_schema() -> None:
    from agent_runner.config import render_docs

    doc = Path(__file__).parents[2] / "docs" / "configuration.md"
    assert doc.read_text() == render_docs(), "run `make docs` to regenerate"
