"""The `agent-runner.toml` schema as frozen dataclasses, and its strict loader.

Every problem is reported as one `ConfigError` line naming the file, `table.key` and what
is wrong; unknown keys get a "did you mean" hint. The schema itself is data (`SCHEMA`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from agent_runner.errors import ConfigError
from agent_runner.files import read_regular
from agent_runner.patterns import (
    GENERIC_PARSER,
    KINDS,
    NO_PATTERNS,
    PatternError,
    Patterns,
    compile_patterns,
)
from agent_runner.presets import FOLDER as PRESETS
from agent_runner.presets import preset_names

CONFIG_NAME = "agent-runner.toml"
SCHEMA_VERSION = 1
PIN_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
DAY_S = 86_400
MAX_CONFIG_BYTES = 1024 * 1024
PATH_MAX = 4096  # Linux, including the terminating NUL
NAME_MAX = 255  # bytes in one path component
SHOWN_CHARS = 120  # longest value or key an error message repeats
MAX_PROMPT_BYTES = 8 * 1024 * 1024  # per file; an agent's prompt, not a data set
# The events after which serve exits 69 (gives up): what an operator must hear about.
GIVE_UP_KINDS = (
    "crash_loop",
    "stalled_no_progress",
    "auth_failed",
    "setup_failed",
    "internal_error_loop",
    "work_tree_changed",
)
CONFINE_MODES = ("off", "workdir", "workdir-if-available")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Key:
    """One key of the schema: its type, default and bounds."""

    kind: Literal["int", "number", "str", "str_list", "str_table", "any_table"]
    default: Any = None
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


SCHEMA: dict[str, dict[str, Key]] = {
    "agent": {
        "preset": Key("str", None),
        "command": Key("str_list", None),
        "prompt_delivery": Key("str", None, choices=("stdin", "argv")),
        "parser": Key("str", None),
        "env": Key("str_table", None),
        "sigterm_grace_s": Key("number", 10, 0.1, 600),
        "confine": Key("str", "off", choices=CONFINE_MODES),
        "writable": Key("str_list", []),
        "patterns": Key("str_table", {}),
    },
    "prompt": {"files": Key("str_list", ["prompts/main.md"])},
    "runtime": {
        "work_dir": Key("str", "."),
        "log_dir": Key("str", ""),
        "round_budget_s": Key("number", 3600, 1, 7 * DAY_S),
        "restart_delay_s": Key("number", 5, 0, DAY_S),
        "max_restart_delay_s": Key("number", 600, 0, 7 * DAY_S),
        "max_rounds": Key("int", 0, 0, 10**9),
        "stop_file": Key("str", ""),
        "stop_mode": Key("str", "terminate", choices=("terminate", "finish_round")),
        "transcript_max_bytes": Key("int", 64 * 1024 * 1024, 64 * 1024, 2**40),
        "transcript_keep_rounds": Key("int", 200, 0, 10**9),
        "idle_timeout_s": Key("number", 0, 0, 7 * DAY_S),
        "round_cgroup": Key("str", "auto", choices=("auto", "off")),
    },
    "breakers": {
        "crash_loop_rounds": Key("int", 5, 1, 10_000),
        "crash_window_s": Key("number", 60, 1, DAY_S),
        "stalled_rounds": Key("int", 10, 1, 10_000),
        "stall_window_s": Key("number", 30, 1, DAY_S),
        "auth_failed_rounds": Key("int", 2, 1, 10_000),
        "internal_error_restarts": Key("int", 3, 1, 10_000),
    },
    "backoff": {
        "estimated_base_s": Key("number", 60, 1, DAY_S),
        "estimated_max_s": Key("number", 1800, 1, 8 * DAY_S),
        "max_wait_s": Key("number", 691_200, 1, 30 * DAY_S),
    },
    "vcs": {
        "dirty_action": Key("str", "stash", choices=("stash", "commit", "ignore")),
        "dirty_handler": Key("str", "builtin"),
        "stash_idempotency_s": Key("number", 60, 0, DAY_S),
        "dirty_file_max_bytes": Key("int", 100 * 1024 * 1024, 1, 2**40),
        "rescue_keep_days": Key("number", 30, 0, 3650),
    },
    "budget": {
        "max_cost_usd_per_day": Key("number", None, 0.01, 10**9),
        "max_tokens_per_day": Key("int", None, 1, 10**15),
        "max_rounds_per_hour": Key("int", None, 1, 10**6),
    },
    "notify": {
        "command": Key("str_list", []),
        "on": Key("str_list", list(GIVE_UP_KINDS)),
    },
    "plugins": {
        "disable": Key("str_list", []),
        "sandbox": Key("str", "prefer", choices=("require", "prefer", "off")),
        "spawn_override_allow": Key("str_list", []),
        "hook_timeout_s": Key("number", 10, 1, 120),
        "max_defer_s": Key("number", 3600, 1, 8 * DAY_S),
        "quarantine_after": Key("int", 3, 1, 1000),
        "pin": Key("str_table", {}),
        "settings": Key("any_table", {}),
    },
}
TOP_LEVEL = ("schema_version", *SCHEMA)


@dataclass(frozen=True)
class WritablePath:
    """A path the confined agent may write beneath; `create`: a folder made when missing."""

    path: Path
    create: bool


@dataclass(frozen=True)
class AgentConfig:
    preset: str | None
    command: tuple[str, ...]
    prompt_delivery: Literal["stdin", "argv"]
    parser: str
    env: Mapping[str, str]
    sigterm_grace_s: float
    confine: Literal["off", "workdir", "workdir-if-available"] = "off"
    writable: tuple[WritablePath, ...] = ()  # the preset's, then [agent] writable
    patterns: Patterns = NO_PATTERNS  # [agent.patterns], read by the `generic` parser


@dataclass(frozen=True)
class PromptConfig:
    files: tuple[Path, ...]


@dataclass(frozen=True)
class RuntimeConfig:
    work_dir: Path
    log_dir: Path
    round_budget_s: float
    restart_delay_s: float
    max_restart_delay_s: float
    max_rounds: int
    stop_file: Path
    stop_mode: Literal["terminate", "finish_round"]
    transcript_max_bytes: int
    transcript_keep_rounds: int
    idle_timeout_s: float  # 0: off
    round_cgroup: Literal["auto", "off"] = "auto"


@dataclass(frozen=True)
class BreakersConfig:
    crash_loop_rounds: int
    crash_window_s: float
    stalled_rounds: int
    stall_window_s: float
    auth_failed_rounds: int
    internal_error_restarts: int


@dataclass(frozen=True)
class BackoffConfig:
    estimated_base_s: float
    estimated_max_s: float
    max_wait_s: float


@dataclass(frozen=True)
class VcsConfig:
    dirty_action: Literal["stash", "commit", "ignore"]
    dirty_handler: str
    stash_idempotency_s: float
    dirty_file_max_bytes: int
    rescue_keep_days: float  # 0: keep forever


@dataclass(frozen=True)
class BudgetConfig:
    """Spend caps; None is no cap."""

    max_cost_usd_per_day: float | None
    max_tokens_per_day: int | None
    max_rounds_per_hour: int | None


@dataclass(frozen=True)
class NotifyConfig:
    """The operator's notification command (empty: none) and the event kinds it hears."""

    command: tuple[str, ...]
    on: tuple[str, ...]


@dataclass(frozen=True)
class PluginsConfig:
    disable: tuple[str, ...]
    sandbox: Literal["require", "prefer", "off"]
    spawn_override_allow: tuple[str, ...]
    hook_timeout_s: float
    max_defer_s: float
    quarantine_after: int
    pin: Mapping[str, str]
    settings: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Config:
    path: Path
    agent: AgentConfig
    prompt: PromptConfig
    runtime: RuntimeConfig
    breakers: BreakersConfig
    backoff: BackoffConfig
    vcs: VcsConfig
    plugins: PluginsConfig
    budget: BudgetConfig
    notify: NotifyConfig
    schema_version: int = field(default=SCHEMA_VERSION)


def find_config(start: Path | None = None) -> Path:
    """The nearest `agent-runner.toml` in `start` or its parents, like git finds `.git`."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{here / CONFIG_NAME}: no {CONFIG_NAME} here or in any parent folder")


def load_config(path: Path | None = None) -> Config:
    """Read and validate a config file; raise ConfigError with one line on any problem."""
    path = find_config() if path is None else path.absolute()
    try:
        raw = read_regular(path, max_bytes=MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    except ValueError:
        # tomllib lets int() refuse a decimal integer of more than 4300 digits.
        raise ConfigError(f"{path}: not valid TOML: an integer with too many digits") from None
    return parse_config(document, path)


def parse_config(document: Mapping[str, Any], path: Path) -> Config:
    """Validate a decoded TOML document against the schema and build a Config."""
    return _Parser(path).parse(document)


def load_preset(name: str) -> dict[str, Any]:
    """The `[agent]` values a preset fills in."""
    if name not in preset_names():
        raise KeyError(name)
    text = (PRESETS / f"{name}.toml").read_text("utf-8")
    values = tomllib.loads(text)
    command = values.get("command")
    if isinstance(command, list) and command[1:3] == ["-m", "agent_runner.demo_agent"]:
        # The demo agent is a module of this package: run it with this very interpreter.
        values["command"] = [sys.executable, *command[1:]]
    return values


def read_prompt(config: Config) -> bytes:
    """The prompt for one round: `[prompt] files` concatenated, each read fresh."""
    parts = []
    for i, path in enumerate(config.prompt.files):
        try:
            data = read_regular(path, max_bytes=MAX_PROMPT_BYTES)
        except OSError as exc:
            raise ConfigError(
                f"{config.path}: prompt.files[{i}]: cannot read {path}: {exc.strerror}"
            ) from None
        if not data.strip():
            raise ConfigError(f"{config.path}: prompt.files[{i}]: {path} is empty")
        parts.append(data if data.endswith(b"\n") else data + b"\n")
    return b"\n".join(parts)


def state_home() -> Path:
    """`$XDG_STATE_HOME`, or `~/.local/state`."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")


def default_log_dir(work_dir: Path) -> Path:
    """`$XDG_STATE_HOME/agent-runner/<name>-<8 hex of the absolute work_dir>`."""
    digest = hashlib.sha256(os.fsencode(work_dir)).hexdigest()[:8]
    # The name is shortened so that name and digest fit in one path component.
    name = (work_dir.name or "root")[: NAME_MAX // 2]
    return state_home() / "agent-runner" / f"{name}-{digest}"


class _Parser:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = path.parent

    def fail(self, where: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.path}: {_clip(where)}: {problem}")

    def parse(self, doc: Mapping[str, Any]) -> Config:
        for name in doc:
            if name not in TOP_LEVEL:
                raise self.fail(name, "unknown table" + did_you_mean(name, TOP_LEVEL))
        if "schema_version" not in doc:
            raise self.fail("schema_version", "required (set schema_version = 1)")
        version = doc["schema_version"]
        if type(version) is not int or version != SCHEMA_VERSION:
            raise self.fail("schema_version", f"must be {SCHEMA_VERSION}, got {_show(version)}")
        tables = {name: self.table(name, doc.get(name, {})) for name in SCHEMA}
        return Config(
            path=self.path,
            agent=self.agent(tables["agent"]),
            prompt=self.prompt(tables["prompt"]),
            runtime=self.runtime(tables["runtime"]),
            breakers=BreakersConfig(**tables["breakers"]),
            backoff=self.backoff(tables["backoff"]),
            vcs=self.vcs(tables["vcs"]),
            plugins=self.plugins(tables["plugins"]),
            budget=self.budget(tables["budget"]),
            notify=NotifyConfig(tuple(tables["notify"]["command"]), tuple(tables["notify"]["on"])),
        )

    def table(self, name: str, raw: Any) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.fail(name, f"must be a table, got {_type_name(raw)}")
        schema = SCHEMA[name]
        for key in raw:
            if key not in schema:
                raise self.fail(f"{name}.{key}", "unknown key" + did_you_mean(key, schema))
        return {
            key: self.value(f"{name}.{key}", spec, raw[key]) if key in raw else spec.default
            for key, spec in schema.items()
        }

    def value(self, where: str, spec: Key, raw: Any) -> Any:
        self.no_nul(where, raw)
        if spec.kind in ("int", "number"):
            return self.number(where, spec, raw)
        if spec.kind == "str":
            if not isinstance(raw, str):
                raise self.fail(where, f"must be a string, got {_type_name(raw)}")
            if spec.choices and raw not in spec.choices:
                choices = ", ".join(spec.choices)
                raise self.fail(where, f"must be one of {choices}; got {_show(raw)}")
            return raw
        if spec.kind == "str_list":
            if not isinstance(raw, list):
                raise self.fail(where, f"must be a list of strings, got {_type_name(raw)}")
            for i, item in enumerate(raw):
                if not isinstance(item, str):
                    raise self.fail(f"{where}[{i}]", f"must be a string, got {_type_name(item)}")
            return list(raw)
        if not isinstance(raw, dict):
            raise self.fail(where, f"must be a table, got {_type_name(raw)}")
        if spec.kind == "str_table":
            for key, item in raw.items():
                if not isinstance(item, str):
                    raise self.fail(f"{where}.{key}", f"must be a string, got {_type_name(item)}")
        return dict(raw)

    def no_nul(self, where: str, raw: Any) -> None:
        """Refuse NUL anywhere: no path, argument or variable can carry one to the kernel."""
        if isinstance(raw, str) and "\0" in raw:
            raise self.fail(where, "must not contain a NUL character")
        if isinstance(raw, list):
            for i, item in enumerate(raw):
                self.no_nul(f"{where}[{i}]", item)
        if isinstance(raw, dict):
            for key, item in raw.items():
                self.no_nul(f"{where}.{key}", key)
                self.no_nul(f"{where}.{key}", item)

    def number(self, where: str, spec: Key, raw: Any) -> float | int:
        wanted = "an integer" if spec.kind == "int" else "a number"
        ok_types: tuple[type, ...] = (int,) if spec.kind == "int" else (int, float)
        if isinstance(raw, bool) or not isinstance(raw, ok_types):
            raise self.fail(where, f"must be {wanted}, got {_type_name(raw)}")
        value = cast(float | int, raw)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(where, f"must be a finite number, got {value}")
        if spec.low is not None and value < spec.low:
            raise self.fail(where, f"must be at least {spec.low:g}, got {_show(value)}")
        if spec.high is not None and value > spec.high:
            raise self.fail(where, f"must be at most {spec.high:g}, got {_show(value)}")
        return value

    def resolve(self, where: str, value: str) -> Path:
        try:
            expanded = Path(value).expanduser()
        except RuntimeError:  # `~nosuchuser`, or `~` with no home directory
            raise self.fail(where, f"cannot expand {_show(value)}: no such user") from None
        path = Path(os.path.normpath(self.base / expanded))
        check_path_length(path, lambda problem: self.fail(where, problem))
        return path

    def agent(self, values: dict[str, Any]) -> AgentConfig:
        preset: dict[str, Any] = {}
        if values["preset"] is not None:
            try:
                preset = load_preset(values["preset"])
            except KeyError:
                names = preset_names()
                raise self.fail(
                    "agent.preset",
                    f"unknown preset {_show(values['preset'])}; known: {', '.join(names)}"
                    + did_you_mean(values["preset"], names),
                ) from None
        merged: dict[str, Any] = {
            key: preset.get(key) if values[key] is None else values[key] for key in values
        }
        merged["env"] = {**preset.get("env", {}), **(values["env"] or {})}
        for name in merged["env"]:
            if not name or "=" in name:
                raise self.fail(f"agent.env.{name}", "not a valid environment variable name")
        if not merged["command"]:
            raise self.fail("agent.command", "required: a non-empty list (or set agent.preset)")
        if not merged["parser"]:
            raise self.fail("agent.parser", "required when no preset names one (e.g. 'none')")
        if not NAME_RE.match(merged["parser"]):
            shown = _show(merged["parser"])
            raise self.fail("agent.parser", f"not a parser or plugin name: {shown}")
        patterns = self.patterns(values["patterns"], merged["parser"])
        agent_env = {**os.environ, **merged["env"]}
        writable = [
            *self.writable("preset writable", preset.get("writable", []), agent_env),
            *self.writable("agent.writable", values["writable"], agent_env),
        ]
        return AgentConfig(
            preset=values["preset"],
            command=tuple(merged["command"]),
            prompt_delivery=merged["prompt_delivery"] or "stdin",
            parser=merged["parser"],
            env=merged["env"],
            sigterm_grace_s=float(merged["sigterm_grace_s"]),
            confine=values["confine"],
            writable=tuple(dict.fromkeys(writable)),
            patterns=patterns,
        )

    def patterns(self, raw: dict[str, str], parser: str) -> Patterns:
        """`[agent.patterns]`, compiled and checked: only the `generic` parser reads them."""
        if raw and parser != GENERIC_PARSER:
            raise self.fail(
                "agent.patterns", f"read only by parser {GENERIC_PARSER!r}, not {_show(parser)}"
            )
        if not raw and parser == GENERIC_PARSER:
            raise self.fail(
                "agent.patterns",
                f"the {GENERIC_PARSER!r} parser reads nothing else: set at least one of "
                + ", ".join(KINDS),
            )
        try:
            return compile_patterns(raw)
        except PatternError as exc:
            key = exc.key if NAME_RE.fullmatch(exc.key) else json.dumps(exc.key)
            raise self.fail(f"agent.patterns.{key}", exc.problem) from None

    def writable(
        self, where: str, entries: list[str], env: Mapping[str, str]
    ) -> list[WritablePath]:
        """`~/…` in the agent's HOME, `$NAME/…` in its variable NAME (left out when unset), or
        a path; a trailing "/" names a folder serve creates when it is missing."""
        paths = []
        for i, entry in enumerate(entries):
            head, _, rest = entry.partition("/")
            if head == "~":
                start = env.get("HOME") or os.path.expanduser("~")
            elif head.startswith("$"):
                if not ENV_NAME_RE.match(head[1:]):
                    raise self.fail(f"{where}[{i}]", f"not a variable name: {_show(head)}")
                start = env.get(head[1:], "")
                if not start:
                    continue  # the agent has no such folder to write
            elif entry.startswith("~"):
                raise self.fail(f"{where}[{i}]", "only ~/ (the agent's HOME) may start a path")
            else:
                start, rest = entry, ""
            if not start:
                raise self.fail(f"{where}[{i}]", "must not be empty")
            path = self.resolve(f"{where}[{i}]", os.path.join(start, rest))
            paths.append(WritablePath(path, create=entry.endswith("/")))
        return paths

    def prompt(self, values: dict[str, Any]) -> PromptConfig:
        if not values["files"]:
            raise self.fail("prompt.files", "must name at least one prompt file")
        return PromptConfig(
            tuple(self.resolve(f"prompt.files[{i}]", f) for i, f in enumerate(values["files"]))
        )

    def runtime(self, values: dict[str, Any]) -> RuntimeConfig:
        work_dir = self.resolve("runtime.work_dir", values["work_dir"])
        if values["log_dir"]:
            log_dir = self.resolve("runtime.log_dir", values["log_dir"])
        else:
            log_dir = default_log_dir(work_dir)
            check_path_length(log_dir, lambda p: self.fail("runtime.log_dir", f"the default {p}"))
        if values["max_restart_delay_s"] < values["restart_delay_s"]:
            raise self.fail(
                "runtime.max_restart_delay_s",
                f"must be at least restart_delay_s ({values['restart_delay_s']})",
            )
        stop_file = (
            self.resolve("runtime.stop_file", values["stop_file"])
            if values["stop_file"]
            else log_dir / "STOP"
        )
        return RuntimeConfig(
            work_dir=work_dir,
            log_dir=log_dir,
            round_budget_s=float(values["round_budget_s"]),
            restart_delay_s=float(values["restart_delay_s"]),
            max_restart_delay_s=float(values["max_restart_delay_s"]),
            max_rounds=values["max_rounds"],
            stop_file=stop_file,
            stop_mode=values["stop_mode"],
            transcript_max_bytes=values["transcript_max_bytes"],
            transcript_keep_rounds=values["transcript_keep_rounds"],
            idle_timeout_s=float(values["idle_timeout_s"]),
            round_cgroup=values["round_cgroup"],
        )

    def backoff(self, values: dict[str, Any]) -> BackoffConfig:
        if values["estimated_max_s"] < values["estimated_base_s"]:
            raise self.fail("backoff.estimated_max_s", "must be at least estimated_base_s")
        return BackoffConfig(**{k: float(v) for k, v in values.items()})

    def vcs(self, values: dict[str, Any]) -> VcsConfig:
        if not NAME_RE.match(values["dirty_handler"]):
            shown = _show(values["dirty_handler"])
            raise self.fail("vcs.dirty_handler", f"not a plugin name: {shown}")
        return VcsConfig(
            dirty_action=values["dirty_action"],
            dirty_handler=values["dirty_handler"],
            stash_idempotency_s=float(values["stash_idempotency_s"]),
            dirty_file_max_bytes=values["dirty_file_max_bytes"],
            rescue_keep_days=float(values["rescue_keep_days"]),
        )

    def budget(self, values: dict[str, Any]) -> BudgetConfig:
        cost = values["max_cost_usd_per_day"]
        return BudgetConfig(
            max_cost_usd_per_day=None if cost is None else float(cost),
            max_tokens_per_day=values["max_tokens_per_day"],
            max_rounds_per_hour=values["max_rounds_per_hour"],
        )

    def plugins(self, values: dict[str, Any]) -> PluginsConfig:
        for name, pin in values["pin"].items():
            if not NAME_RE.fullmatch(name):
                # Quoted as TOML writes such a key, so the message stays one line.
                raise self.fail(
                    f"plugins.pin.{json.dumps(name)}",
                    "not an entry-point name (letters, digits, _ . -)",
                )
            if not PIN_RE.match(pin):
                raise self.fail(f"plugins.pin.{name}", 'must look like "sha256:<64 lowercase hex>"')
        for name, table in values["settings"].items():
            if not isinstance(table, dict):
                raise self.fail(f"plugins.settings.{name}", "must be a table")
            found = _not_json(table, f"plugins.settings.{name}")
            if found is not None:
                raise self.fail(*found)
        return PluginsConfig(
            disable=tuple(values["disable"]),
            sandbox=values["sandbox"],
            spawn_override_allow=tuple(values["spawn_override_allow"]),
            hook_timeout_s=float(values["hook_timeout_s"]),
            max_defer_s=float(values["max_defer_s"]),
            quarantine_after=values["quarantine_after"],
            pin=dict(values["pin"]),
            settings={name: dict(table) for name, table in values["settings"].items()},
        )


def check_path_length(path: Path, fail: Callable[[str], ConfigError]) -> None:
    """Raise `fail(problem)` for a path the kernel would refuse as too long (ENAMETOOLONG)."""
    encoded = os.fsencode(path)
    if len(encoded) >= PATH_MAX:
        raise fail(f"path is {len(encoded)} bytes long; the limit is {PATH_MAX - 1}")
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise fail(f"a path component is longer than {NAME_MAX} bytes: {_show(part)}")


def _show(value: Any) -> str:
    """A value for an error message: never huge, and never an int too long to print."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits} digits"
    return _clip(repr(value) if isinstance(value, str) else str(value))


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _not_json(value: Any, where: str) -> tuple[str, str] | None:
    """(key, problem) for the first value in a settings table that JSON cannot carry to a hook."""
    if isinstance(value, dict):
        items: Any = ((f"{where}.{key}", item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{index}]", item) for index, item in enumerate(value))
    elif isinstance(value, float) and not math.isfinite(value):
        return where, "nan and inf cannot reach a plugin (its settings are JSON)"
    elif not isinstance(value, str | int | float | bool):
        return where, "a date or time cannot reach a plugin (its settings are JSON): use a string"
    else:
        return None
    for key, item in items:
        found = _not_json(item, key)
        if found is not None:
            return found
    return None


def did_you_mean(name: str, known: Any) -> str:
    """` (did you mean 'x'?)` for the closest of `known`, or nothing."""
    import difflib  # noqa: PLC0415 - only a broken config needs it, never a round

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    names |= {list: "a list", dict: "a table"}
    return names.get(type(value), type(value).__name__)


def render_docs() -> str:
    """docs/configuration.md, generated from SCHEMA."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from `agent_runner.config.SCHEMA` by `python -m agent_runner.config`; a test",
        "fails when this file is stale. `schema_version = 1` is required. Relative paths resolve",
        "against the config file's folder. Unknown tables and keys are errors.",
        "",
        "| key | type | default | allowed |",
        "| --- | --- | --- | --- |",
    ]
    for table, keys in SCHEMA.items():
        for name, key in keys.items():
            allowed = ", ".join(key.choices) if key.choices else ""
            if key.low is not None:
                allowed = f"{key.low:g} .. {key.high:g}"
            if key.default is None:
                shown = "from the preset" if table == "agent" and name != "preset" else "none"
            else:
                shown = f"`{json.dumps(key.default)}`"
            lines.append(f"| `{table}.{name}` | {key.kind} | {shown} | {allowed} |")
    lines += [
        "",
        "`runtime.log_dir` defaults to `$XDG_STATE_HOME/agent-runner/<name>-<8 hex of the",
        "absolute work_dir>` (`~/.local/state` when XDG_STATE_HOME is unset); `runtime.stop_file`",
        "defaults to `<log_dir>/STOP`; `runtime.transcript_keep_rounds = 0` keeps every",
        "transcript; `runtime.idle_timeout_s = 0` turns the silence watchdog off;",
        "`vcs.rescue_keep_days = 0` keeps `refs/agent-runner/rounds/*` forever.",
        "`agent.command` and `agent.parser` are required unless",
        "`agent.preset` supplies them. `plugins.pin` keys are entry-point names; values must",
        "match `^sha256:[0-9a-f]{64}$`. A `plugins.settings.<name>` table reaches that plugin's",
        "hooks as `view.settings`, so it holds JSON data only: no dates or times, `nan` or `inf`.",
        "",
        '`agent.confine = "workdir"` lets the agent write only beneath its work tree, the',
        "transcripts folder, a TMPDIR of each round's own, a few devices, the preset's state",
        'folders and `agent.writable` (docs/agents.md); `"workdir-if-available"` runs it',
        "unconfined where the kernel has no Landlock. `agent.writable` entries are added to the",
        "preset's: `~/…` is in the agent's HOME, `$NAME/…` in its variable NAME (left out when",
        'unset), and a trailing "/" names a folder serve creates when missing. Both keys take',
        "effect when serve restarts.",
        "",
        "`agent.patterns` is a table of named regular expressions (`rate_limit`, `quota`,",
        '`outage`, `auth`, `setup`, `usage`) read only by `agent.parser = "generic"`, which',
        "needs at least one. A pattern that does not compile, matches the empty string, names a",
        "group its kind does not read or repeats a repetition (`(a+)+`) is a config error",
        "(docs/agents.md, `generic`).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_docs())
