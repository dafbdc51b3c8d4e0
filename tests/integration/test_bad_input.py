"""Bad input through the real CLI, generated: deep nesting, huge numbers, special files,
bytes that are not UTF-8 and over-long paths in the config, a prompt, state.json and the
event log. Each gets its exact outcome: exit 78 and one line naming the file, or a clean
run that sets the damage aside; never a traceback, a hang or exit 1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import AGENTS, git

QUICK_S = 30
FUZZ = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass
class Scene:
    root: Path
    config: Path
    prompt: Path
    log_dir: Path

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "agent_runner", *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            errors="backslashreplace",
            timeout=QUICK_S,
            cwd=self.root,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def events_file(self) -> Path:
        return self.log_dir / f"events-{time.strftime('%Y-%m', time.gmtime())}.jsonl"


@contextmanager
def scene(tmp_path: Path) -> Iterator[Scene]:
    """A fresh project per example: a git work tree, a valid config and prompt, no logs."""
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    work = root / "work"
    work.mkdir()
    git(work, "init", "-q")
    (root / "prompt.md").write_text("do the work\n")
    config = root / "agent-runner.toml"
    write_config(config, {})
    try:
        yield Scene(root, config, root / "prompt.md", root / "logs")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_config(path: Path, runtime: dict[str, str]) -> None:
    document = {
        "schema_version": 1,
        "agent": {"command": [sys.executable, str(AGENTS / "exits_with.py"), "0"]},
        "prompt": {"files": ["prompt.md"]},
        "runtime": {"work_dir": "work", "log_dir": "logs", "restart_delay_s": 0, **runtime},
    }
    document["agent"]["parser"] = "none"
    path.write_text(tomli_w.dumps(document))


def last_line(text: str) -> str:
    return text.rstrip("\n").rsplit("\n", 1)[-1]


# --- the config ----------------------------------------------------------------------------

Damage = Callable[[Scene], str]  # damages the scene; returns what the error line must say


def nested_config(depth: int) -> Damage:
    def damage(s: Scene) -> str:
        with s.config.open("a") as f:
            f.write(f"\n[plugins.settings.x]\ndeep = {'[' * depth}{']' * depth}\n")
        return "not valid TOML: arrays or tables nested too deeply"

    return damage


def huge_decimal(digits: int) -> Damage:
    def damage(s: Scene) -> str:
        text = s.config.read_text().replace("restart_delay_s = 0", f"max_rounds = {'7' * digits}")
        s.config.write_text(text)
        return "not valid TOML: an integer with too many digits"

    return damage


def huge_hex(digits: int) -> Damage:
    def damage(s: Scene) -> str:
        text = s.config.read_text().replace("restart_delay_s = 0", f"max_rounds = 0x{'f' * digits}")
        s.config.write_text(text)
        return "runtime.max_rounds: must be at most 1e+09, got an integer of about"

    return damage


def not_utf8(junk: bytes) -> Damage:
    def damage(s: Scene) -> str:
        s.config.write_bytes(s.config.read_bytes() + b"\n# " + junk + b"\xff\n")
        return "not UTF-8 text"

    return damage


def long_component(length: int) -> Damage:
    def damage(s: Scene) -> str:
        write_config(s.config, {"work_dir": "w" * length})
        return "runtime.work_dir: a path component is longer than 255 bytes"

    return damage


def long_path(parts: int) -> Damage:
    def damage(s: Scene) -> str:
        write_config(s.config, {"log_dir": "/".join(["d" * 200] * parts)})
        return "runtime.log_dir: path is"

    return damage


def unknown_user(name: str) -> Damage:
    def damage(s: Scene) -> str:
        write_config(s.config, {"work_dir": f"~{name}/work"})
        return f"runtime.work_dir: cannot expand '~{name}/work': no such user"

    return damage


def special_config(kind: str) -> Damage:
    def damage(s: Scene) -> str:
        s.config.unlink()
        if kind == "fifo":
            os.mkfifo(s.config)
            return "cannot read: a FIFO, not a regular file"
        if kind == "directory":
            s.config.mkdir()
            return "cannot read: a directory, not a regular file"
        s.config.symlink_to("/dev/zero")
        return "cannot read: a character device, not a regular file"

    return damage


CONFIG_DAMAGE = st.one_of(
    st.integers(600, 5000).map(nested_config),
    st.integers(4301, 9000).map(huge_decimal),
    st.integers(26, 4000).map(huge_hex),  # above 10**30: shown by its size
    st.binary(max_size=20).map(not_utf8),
    st.integers(256, 2000).map(long_component),
    st.integers(21, 60).map(long_path),
    st.text("abcdefghijklmnopqrstuvwxyz", min_size=12, max_size=20).map(unknown_user),
    st.sampled_from(["fifo", "directory", "device"]).map(special_config),
)


@FUZZ
@given(damage=CONFIG_DAMAGE)
def test_a_damaged_config_is_exit_78_and_one_line_for_every_command(
    tmp_path: Path, damage: Damage
) -> None:
    with scene(tmp_path) as s:
        said = damage(s)
        for command in (["serve", "--once"], ["peek", "--json"], ["events"]):
            done = s.cli(*command)
            assert done.returncode == 78, (command, done.stderr)
            assert done.stderr.count("\n") == 1, (command, done.stderr)
            assert done.stderr.startswith(f"agent-runner: {s.config}: "), done.stderr
            assert said in done.stderr, (command, done.stderr)
        doctor = s.cli("doctor")
        assert doctor.returncode == 78, doctor.stderr
        assert doctor.stdout.startswith("FAIL  config: "), doctor.stdout
        assert said in doctor.stdout


# --- a prompt --------------------------------------------------------------------------------


def special_prompt(kind: str) -> Damage:
    def damage(s: Scene) -> str:
        s.prompt.unlink()
        if kind == "fifo":
            os.mkfifo(s.prompt)
            return "a FIFO, not a regular file"
        if kind == "directory":
            s.prompt.mkdir()
            return "a directory, not a regular file"
        if kind == "huge":
            with s.prompt.open("wb") as f:
                f.truncate(8 * 1024 * 1024 + 1)
            return f"larger than {8 * 1024 * 1024} bytes"
        s.prompt.symlink_to("/dev/zero")
        return "a character device, not a regular file"

    return damage


@settings(FUZZ, max_examples=4)
@given(damage=st.sampled_from(["fifo", "directory", "device", "huge"]).map(special_prompt))
def test_a_prompt_that_is_no_file_stops_only_serve_and_doctor(
    tmp_path: Path, damage: Damage
) -> None:
    with scene(tmp_path) as s:
        said = damage(s)
        serve = s.cli("serve", "--once")
        assert serve.returncode == 78, serve.stderr
        error = last_line(serve.stderr)
        assert error.startswith(f"agent-runner: {s.config}: prompt.files[0]: cannot read "), error
        assert error.endswith(said), error
        doctor = s.cli("doctor")
        assert doctor.returncode == 1
        assert "FAIL  prompt files: prompt.files[0]: cannot read " in doctor.stdout
        for command in (["peek", "--json"], ["events"]):
            assert s.cli(*command).returncode == 0, command


# --- state.json ------------------------------------------------------------------------------

STATE_FILE_DAMAGE = st.one_of(
    st.integers(17, 3000).map(lambda d: ("{" + '"a":[' * d + "]" * d + "}").encode()),
    st.integers(4301, 6000).map(lambda n: b'{"last_round_number": ' + b"9" * n + b"}"),
    st.binary(min_size=1, max_size=40).map(lambda b: b'{"supervisor": "' + b + b'\xff"}'),
    st.sampled_from(
        [
            b'{"supervisor": "x"}',
            b'{"round": 5}',
            b'{"loop": []}',
            b'{"last_round": {"round": 1}}',
            b'{"sandbox": {"tier": "full"}}',
            b'{"rounds_run": true}',
            b'{"loop": {"crash_streak": -1}}',
            b"[]",
            b"",
        ]
    ),
)


def damaged_state(content: bytes | str) -> Damage:
    def damage(s: Scene) -> str:
        s.log_dir.mkdir()
        path = s.log_dir / "state.json"
        if content == "fifo":
            os.mkfifo(path)
        elif content == "directory":
            path.mkdir()
            (path / "inside").write_text("kept")
        elif content == "symlink":
            path.symlink_to("/dev/zero")
        else:
            assert isinstance(content, bytes)
            path.write_bytes(content)
        return ""

    return damage


@settings(FUZZ, max_examples=10)
@given(
    damage=st.one_of(STATE_FILE_DAMAGE, st.sampled_from(["fifo", "directory", "symlink"])).map(
        damaged_state
    )
)
def test_a_damaged_state_file_is_set_aside_and_serve_boots(tmp_path: Path, damage: Damage) -> None:
    with scene(tmp_path) as s:
        damage(s)
        peek = s.cli("peek", "--json")
        assert peek.returncode == 0, peek.stderr
        assert json.loads(peek.stdout)["supervisor"]["rounds_run"] == 0
        assert s.cli("status", "--json").returncode == 3  # not running

        serve = s.cli("serve", "--once")
        assert serve.returncode == 0, serve.stderr
        events = [json.loads(line) for line in s.events_file().read_text().splitlines()]
        aside = [e for e in events if e["event"] == "state_file_set_aside"]
        assert len(aside) == 1, events
        assert Path(aside[0]["path"]).name.startswith("state.json.damaged-")
        assert os.path.lexists(aside[0]["path"]), "the damaged file is kept, renamed"
        assert [e["event"] for e in events].count("round_end") == 1
        assert json.loads((s.log_dir / "state.json").read_text())["rounds_run"] == 1


# --- the event log ---------------------------------------------------------------------------

BAD_LINES = st.one_of(
    st.integers(17, 5000).map(lambda d: '{"event":"x","a":' + "[" * d + "]" * d + "}"),
    st.integers(4301, 6000).map(lambda n: '{"event":"round_start","round":' + "9" * n + "}"),
    st.binary(min_size=1, max_size=40).map(lambda b: b.decode("latin-1") + "\udcff"),
    st.just('{"event":"round_start","round":1,"note":"\\udcff\\ud800"}'),
    st.integers(1, 3).map(lambda n: "x" * (n * 1024 * 1024 + 7)),
)


@settings(FUZZ, max_examples=6)
@given(lines=st.lists(BAD_LINES, min_size=1, max_size=3))
def test_damaged_event_lines_are_skipped_by_peek_and_events(
    tmp_path: Path, lines: list[str]
) -> None:
    with scene(tmp_path) as s:
        s.log_dir.mkdir()
        good = '{"ts":"2026-01-01T00:00:00.000Z","event":"round_end","round":7}\n'
        raw = good.encode() + b"".join(
            line.encode("utf-8", "surrogateescape") + b"\n" for line in lines
        )
        s.events_file().write_bytes(raw + good.encode())
        peek = s.cli("peek", "--json", "--events", "50")
        assert peek.returncode == 0, peek.stderr
        shown = [e for e in json.loads(peek.stdout)["events"] if e["event"] == "round_end"]
        assert len(shown) == 2
        for command in (["events"], ["events", "--json"], ["events", "--kind", "round_end"]):
            done = s.cli(*command)
            assert done.returncode == 0, (command, done.stderr)
            assert done.stdout.count("round_end") == 2, (command, done.stdout[:500])


def test_an_events_file_that_is_a_directory_or_fifo_is_skipped(tmp_path: Path) -> None:
    for kind in ("directory", "fifo"):
        with scene(tmp_path) as s:
            s.log_dir.mkdir()
            older = s.log_dir / "events-2000-01.jsonl"
            older.write_text('{"ts":"2000-01-01T00:00:00.000Z","event":"round_end","round":1}\n')
            if kind == "directory":
                s.events_file().mkdir()
            else:
                os.mkfifo(s.events_file())
            for command in (["peek", "--json"], ["events"], ["events", "--json"]):
                done = s.cli(*command)
                assert done.returncode == 0, (kind, command, done.stderr)
                assert "round_end" in done.stdout, (kind, command)
