"""The JSON every `--json` prints: one typed, versioned schema per command (SPEC §2, §14).

Producers build these dataclasses, so no key can appear that the schema lacks; `problems`
checks parsed output against the same types, and `render_docs` writes docs/json.md from them.
Adding a key keeps `SCHEMA_VERSION`; renaming, removing or retyping one raises it.
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

SCHEMA_VERSION = 1
T = TypeVar("T")

SupervisorState = Literal[
    "running", "waiting", "backoff", "deferred", "stopping", "stopped", "crashed", "stale"
]
# The states in which a serve process is alive: `status` exits 0 in these, 3 otherwise.
ALIVE_STATES = frozenset({"running", "waiting", "backoff", "deferred", "stopping"})
CheckStatus = Literal["ok", "warn", "fail"]
Scalar = str | int | float | bool | None


# Documents are built once and printed as JSON, never compared, hashed or shown by repr:
# eq=False, repr=False and no frozen, since every generated method is compiled at import,
# on peek's and status's fast path. Each class has a docstring for the same reason
# (dataclass would otherwise write one from inspect.signature).
@dataclass(kw_only=True, eq=False, repr=False)
class Document:
    """What every document carries."""

    schema_version: Annotated[int, "version of this document's schema; 1 for now"] = SCHEMA_VERSION


@dataclass(kw_only=True, eq=False, repr=False)
class Project:
    """`project`: what this project is, from its config."""

    config: Annotated[str, "the agent-runner.toml that was read"]
    work_dir: Annotated[str, "the agent's work tree"]
    log_dir: Annotated[str, "events, state.json, transcripts"]
    agent: Annotated[list[str], "the agent's argv (values of secret-looking flags redacted)"]
    parser: Annotated[str, "the transcript parser named by agent.parser"]
    idle_timeout_s: Annotated[float, "runtime.idle_timeout_s: a round this silent ends (0: off)"]


@dataclass(kw_only=True, eq=False, repr=False)
class PendingStop:
    """`supervisor.pending_stop`: a stop serve has accepted."""

    mode: Annotated[Literal["terminate", "finish_round"], "how serve stops"]
    source: Annotated[str, "who asked: SIGTERM, stop command, stop file, ..."]


@dataclass(kw_only=True, eq=False, repr=False)
class Supervisor:
    """`supervisor`: the serve process, its state and why."""

    state: Annotated[
        SupervisorState,
        "running: a round runs; waiting: restart delay, boot, a spend cap or a missing prompt; "
        "backoff: "
        "waiting out a transient error; deferred: a spawn hook holds the next round; "
        "stopping: a stop is pending; stopped; crashed: the last serve died of an internal "
        "error; stale: state.json says a serve runs but its process is gone or is another one",
    ]
    pid: Annotated[int | None, "serve's pid; for stale, the pid state.json names"]
    started_at: Annotated[float | None, "when that serve started (epoch seconds)"]
    uptime_s: Annotated[float | None, "seconds since then, while it runs"]
    version: Annotated[str | None, "agent-runner version of that serve"]
    rounds_run: Annotated[int, "rounds that serve has run"]
    pending_stop: Annotated[PendingStop | None, "a stop serve has accepted and not done yet"]
    reason: Annotated[str | None, "why it is in this state: what it waits for, why it stopped"]


@dataclass(kw_only=True, eq=False, repr=False)
class Round:
    """`round`: the round running now."""

    n: Annotated[int, "the round number"]
    started_at: Annotated[float | None, "when the agent was spawned (epoch seconds)"]
    elapsed_s: Annotated[float | None, "seconds since then"]
    budget_s: Annotated[float, "runtime.round_budget_s: the round is killed at this age"]
    agent_pid: Annotated[int | None, "the agent's pid (its process group and session leader)"]
    cgroup: Annotated[str | None, "the round's own cgroup, where it has one"]
    silent_s: Annotated[float | None, "seconds since the agent last wrote to its transcript"]
    confined: Annotated[bool | None, "whether Landlock confines the agent ([agent] confine)"]
    landlock_abi: Annotated[int | None, "the Landlock ABI it is confined at; null unconfined"]


@dataclass(kw_only=True, eq=False, repr=False)
class RoundSummary:
    """One of `last_rounds`: how a round ended."""

    round: Annotated[int, "the round number"]
    exit_code: Annotated[int | None, "the agent's exit status; null when a signal ended it"]
    signal: Annotated[str | None, "the signal that ended it (SIGKILL, ...)"]
    exit_cause: Annotated[str, "clean, error, timeout, signal:NAME or stopped"]
    duration_s: Annotated[float, "the agent's run time"]
    transient: Annotated[str | None, "the transient error class the round showed"]
    auth_error: Annotated[bool, "the transcript showed an auth failure"]
    setup_error: Annotated[bool, "the CLI refused to start in this setup"]
    tree_action: Annotated[str | None, "what was done with the work tree: stash, commit, ..."]
    tree_ref: Annotated[str | None, "the stash or commit that holds the work (`rescue`)"] = None
    ended_at: Annotated[float | None, "when the round ended (epoch seconds)"] = None


@dataclass(kw_only=True, eq=False, repr=False)
class Backoff:
    """`backoff`: a back-off not yet over."""

    until: Annotated[float, "when the next round may start (epoch seconds)"]
    remaining_s: Annotated[float, "seconds until then"]
    classification: Annotated[str | None, "rate_limit_account, api_transient_5xx, ..."]
    reason: Annotated[str | None, "what the provider said (redacted, one line)"]
    source: Annotated[
        Literal["server", "estimated"] | None, "server: a reset time the provider gave"
    ]


@dataclass(kw_only=True, eq=False, repr=False)
class SpendCaps:
    """`budget.caps`: the [budget] caps."""

    max_cost_usd_per_day: Annotated[float | None, "budget.max_cost_usd_per_day (null: none)"]
    max_tokens_per_day: Annotated[int | None, "budget.max_tokens_per_day (null: none)"]
    max_rounds_per_hour: Annotated[int | None, "budget.max_rounds_per_hour (null: none)"]


@dataclass(kw_only=True, eq=False, repr=False)
class Spent:
    """`budget.last_24h`: what the rolling day holds."""

    rounds: Annotated[int, "rounds in the window"]
    tokens: Annotated[int, "tokens the CLI reported"]
    cost_usd: Annotated[float, "cost the CLI reported (never computed)"]


@dataclass(kw_only=True, eq=False, repr=False)
class RoundsSpent:
    """`budget.last_hour`: what the rolling hour holds."""

    rounds: Annotated[int, "rounds in the window"]


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetWaiting:
    """`budget.waiting`: the wait serve is in for a cap."""

    cap: Annotated[str, "the cap that is reached"]
    used: Annotated[float, "what its window holds"]
    limit: Annotated[float, "the cap"]
    until: Annotated[float, "when the window has room again (epoch seconds)"]
    remaining_s: Annotated[float, "seconds until then"]


@dataclass(kw_only=True, eq=False, repr=False)
class Budget:
    """`budget`: spend caps and what the rolling windows hold."""

    caps: Annotated[SpendCaps, "the [budget] caps"]
    last_24h: Annotated[Spent, "the rolling day"]
    last_hour: Annotated[RoundsSpent, "the rolling hour"]
    waiting: Annotated[BudgetWaiting | None, "the wait serve is in for a cap, if any"]


@dataclass(kw_only=True, eq=False, repr=False)
class NotifyRun:
    """`notify.last`: the last run of the notify command."""

    kind: Annotated[str, "the event kind it was run for"]
    at: Annotated[float | None, "when (epoch seconds)"]
    ok: Annotated[bool, "it exited 0 in time"]
    reason: Annotated[str | None, "why it failed"]


@dataclass(kw_only=True, eq=False, repr=False)
class Notify:
    """`notify`: the [notify] command and how its runs went."""

    command: Annotated[list[str], "[notify] command (empty: off)"]
    on: Annotated[list[str], "[notify] on: the kinds it runs for"]
    sent: Annotated[int, "runs that succeeded, by the last serve"]
    failed: Annotated[int, "runs that failed (notify_failed)"]
    rate_limited: Annotated[int, "events not sent: too soon after the last of their kind"]
    last: Annotated[NotifyRun | None, "the last run"]


@dataclass(kw_only=True, eq=False, repr=False)
class Deferral:
    """`deferred`: a spawn hook holding the next round back."""

    action: Annotated[str, "defer or skip"]
    hook: Annotated[str, "the spawn hook that decided"]
    reason: Annotated[str, "the hook's reason"]
    until: Annotated[float | None, "when the round is asked again (epoch seconds)"]
    remaining_s: Annotated[float | None, "seconds until then"]


@dataclass(kw_only=True, eq=False, repr=False)
class Breaker:
    """One of `breakers`: a streak and where serve gives up."""

    count: Annotated[int, "the streak so far"]
    limit: Annotated[int, "serve gives up (exit 69) when count reaches this"]


@dataclass(kw_only=True, eq=False, repr=False)
class SandboxReport:
    """`plugins.sandbox`: what the last sandbox probe enforced."""

    tier: Annotated[Literal["full", "landlock", "seccomp", "none"], "what confines plugin calls"]
    landlock_abi: Annotated[int, "the kernel's Landlock ABI (0: none)"]
    fs: Annotated[bool, "Landlock filesystem rules enforced"]
    net: Annotated[bool, "Landlock TCP bind/connect rules enforced"]
    scope: Annotated[bool, "Landlock signal and abstract-socket scoping enforced"]
    seccomp: Annotated[bool, "the seccomp filter is enforced"]
    unconfined_reason: Annotated[str | None, "why the tier is below full"]


@dataclass(kw_only=True, eq=False, repr=False)
class PluginEntry:
    """One builtin or discovered plugin, as `plugins list` and peek show it."""

    name: Annotated[str, "the entry-point name"]
    kind: Annotated[Literal["builtin", "squatter", "third-party"], "provenance"]
    dist: Annotated[str, "the distribution that declares it"]
    version: Annotated[str, "its version"]
    site: Annotated[str, "where it is installed (empty for builtins)"]
    state: Annotated[
        Literal["builtin", "admitted", "refused", "disabled", "quarantined", "not_admitted"],
        "what serve made of it; not_admitted: no serve has seen these files",
    ]
    pin: Annotated[str | None, "the pin in [plugins.pin]"] = None
    pin_state: Annotated[
        Literal["verified", "mismatch", "unpinned", "refused"] | None, "the pin check"
    ] = None
    digest: Annotated[str | None, "sha256 over the whole distribution (docs/plugins.md)"] = None
    reason: Annotated[str | None, "why it was refused or quarantined"] = None
    families: Annotated[dict[str, list[str]] | None, "hook names per family, once admitted"] = None
    event_kinds: Annotated[list[str] | None, "event kinds it may emit, once admitted"] = None
    tier: Annotated[str | None, "how its calls run: a sandbox tier, or in-process"] = None
    failures: Annotated[int, "failed calls in a row"] = 0


@dataclass(kw_only=True, eq=False, repr=False)
class Plugins:
    """`plugins`: the sandbox and every plugin, as the last serve left them."""

    sandbox: Annotated[SandboxReport | None, "the last serve's sandbox probe"]
    sandbox_reason: Annotated[str | None, "why sandbox is null"]
    entries: Annotated[list[PluginEntry], "every builtin and every plugin the last serve saw"]


@dataclass(kw_only=True, eq=False, repr=False)
class Defense:
    """One of `defenses`: a guard, its value, and whether it is active."""

    name: Annotated[str, "the guard"]
    value: Annotated[Scalar, "its setting"]
    active: Annotated[bool, "whether it protects the next round"]
    detail: Annotated[str, "what it does, or why it is off"]


@dataclass(kw_only=True, eq=False, repr=False)
class PeekDocument(Document):
    """`agent-runner peek --json`: read from state.json and the event log's tail only."""

    project: Annotated[Project, "what this project is, from its config"]
    supervisor: Annotated[Supervisor, "the serve process: its state and why"]
    round: Annotated[Round | None, "the round running now"]
    last_rounds: Annotated[list[RoundSummary], "the last 10 rounds, newest first"]
    backoff: Annotated[Backoff | None, "a back-off not yet over"]
    deferred: Annotated[Deferral | None, "a spawn hook holding the next round back"]
    breakers: Annotated[dict[str, Breaker], "every breaker, by name (docs/events.md)"]
    budget: Annotated[Budget, "spend caps and what the rolling windows hold"]
    notify: Annotated[Notify, "the [notify] command and how its runs went"]
    plugins: Annotated[Plugins, "the sandbox and every plugin, as the last serve left them"]
    defenses: Annotated[list[Defense], "each guard, its value, and whether it is active"]
    events: Annotated[
        list[dict[str, Any]], "the last --events N events, oldest first (docs/events.md)"
    ]


@dataclass(kw_only=True, eq=False, repr=False)
class Unit:
    """`systemd`: the installed unit of this project."""

    unit: Annotated[str, "the instance, agent-runner@<escaped path>.service"]
    scope: Annotated[Literal["user", "system"], "which systemd manager has it"]
    active: Annotated[str, "systemctl is-active"]
    enabled: Annotated[str, "systemctl is-enabled"]


@dataclass(kw_only=True, eq=False, repr=False)
class StatusDocument(Document):
    """`agent-runner status --json`: exit 0 while serve runs, 3 when it does not."""

    project: Annotated[Project, "as in peek --json"]
    supervisor: Annotated[Supervisor, "as in peek --json"]
    round: Annotated[Round | None, "the round running now"]
    systemd: Annotated[Unit | None, "the installed unit; null when none is"]


@dataclass(kw_only=True, eq=False, repr=False)
class HostUnit:
    """One of a host project's `units`."""

    unit: Annotated[str, "agent-runner@<escaped path>.service"]
    scope: Annotated[Literal["user", "system"], "which systemd manager has it"]
    project_dir: Annotated[str, "the folder the unit runs serve in"]


@dataclass(kw_only=True, eq=False, repr=False)
class HostProject:
    """One of `status --all`'s projects."""

    name: Annotated[str, "the log_dir's folder name"]
    log_dir: Annotated[str, "where its serve keeps state.json and events"]
    work_dir: Annotated[str | None, "its work tree, as its last serve or its unit names it"]
    supervisor: Annotated[Supervisor, "as in status --json"]
    round: Annotated[int | None, "the round running now"]
    backoff: Annotated[Backoff | None, "a back-off not yet over"]
    last_round: Annotated[RoundSummary | None, "the last round that ended"]
    today: Annotated[Spent, "since local midnight, as the CLI reported"]
    units: Annotated[list[HostUnit], "installed units running this project"]
    problem: Annotated[str | None, "why its state or its unit's config cannot be read"]


@dataclass(kw_only=True, eq=False, repr=False)
class HostDocument(Document):
    """`agent-runner status --all --json`: every project with state on this host, read from
    state files only; running ones first. Exit 0."""

    state_home: Annotated[str, "the folder searched: $XDG_STATE_HOME/agent-runner"]
    projects: Annotated[list[HostProject], "one per log_dir"]


@dataclass(kw_only=True, eq=False, repr=False)
class Check:
    """One of doctor's checks."""

    name: Annotated[str, "what was checked"]
    status: Annotated[CheckStatus, "fail makes doctor exit 1 (and serve refuse to boot)"]
    detail: Annotated[str, "what was found; for a boot check's fail, serve's own words"]
    fix: Annotated[str, "what to do about it (empty when ok)"]


@dataclass(kw_only=True, eq=False, repr=False)
class DoctorSandbox:
    """doctor's `sandbox`: the probe and the self-test."""

    mode: Annotated[Literal["require", "prefer", "off"], "plugins.sandbox"]
    tier: Annotated[str | None, "the tier the probe achieved"]
    landlock_abi: Annotated[int | None, "the kernel's Landlock ABI"]
    fs: Annotated[bool | None, "Landlock filesystem rules enforced"]
    net: Annotated[bool | None, "Landlock TCP rules enforced"]
    scope: Annotated[bool | None, "Landlock scoping enforced"]
    seccomp: Annotated[bool | None, "the seccomp filter is enforced"]
    unconfined_reason: Annotated[str | None, "why the tier is below full"]
    self_test: Annotated[
        dict[str, bool] | None, "each forbidden operation a confined child tried: blocked?"
    ]


@dataclass(kw_only=True, eq=False, repr=False)
class DoctorDocument(Document):
    """`agent-runner doctor --json`: exit 0 when no check fails, 1 otherwise, 78 for a config
    that does not load (then `checks` holds that one failure)."""

    ok: Annotated[bool, "no check failed"]
    checks: Annotated[list[Check], "in order: config, serve's boot checks, then doctor's own"]
    sandbox: Annotated[DoctorSandbox | None, "the probe and self-test; null when not run"]
    plugins: Annotated[list[PluginEntry], "as `plugins list --json` shows them"]


@dataclass(kw_only=True, eq=False, repr=False)
class StopDocument(Document):
    """`agent-runner stop --json`: exit 0 when serve stopped (or agreed to, with
    --after-round) or none was running; 1 when it is still running at --timeout."""

    outcome: Annotated[
        Literal["stopped", "pending", "not_running", "timeout"],
        "pending: serve stops when its round ends (--after-round)",
    ]
    pid: Annotated[int | None, "the serve that was asked"]
    waited_s: Annotated[float, "seconds spent waiting for it"]
    detail: Annotated[str, "the one line the human output prints"]


@dataclass(kw_only=True, eq=False, repr=False)
class PluginsDocument(Document):
    """`agent-runner plugins list --json`."""

    plugins: Annotated[list[PluginEntry], "every builtin and every discovered entry point"]


@dataclass(kw_only=True, eq=False, repr=False)
class RescueEntry:
    """One piece of work serve secured."""

    sha: Annotated[str, "the stash or commit serve made"]
    round: Annotated[int, "the round whose work it holds"]
    action: Annotated[Literal["stash", "commit"], "how it was secured"]
    exit_cause: Annotated[str | None, "how that round ended"]
    at: Annotated[float | None, "when it was secured (epoch seconds)"]
    files: Annotated[list[str], "the files it holds (the first 20)"]
    count: Annotated[int | None, "how many files"]
    bytes: Annotated[int | None, "their size"]
    exists: Annotated[bool, "the commit is still in the repository"]
    kept_by: Annotated[list[str], "what keeps it from git gc: refs/agent-runner/rounds/<n>, ..."]
    reachable: Annotated[bool, "kept_by is not empty: safe from git gc"]


@dataclass(kw_only=True, eq=False, repr=False)
class RescueDocument(Document):
    """`agent-runner rescue --json`: every piece of work serve secured, oldest round first."""

    secured: Annotated[list[RescueEntry], "one per stash or auto-commit"]


@dataclass(kw_only=True, eq=False, repr=False)
class EventLine(Document):
    """`agent-runner events --json`: one JSON object per line (JSONL), each an event with
    `schema_version` added; the other keys are the kind's fields (docs/events.md)."""

    ts: Annotated[str, "UTC, milliseconds: 2026-11-30T18:41:30.033Z"]
    event: Annotated[str, "the kind: a registered one, or <plugin>.<kind>"]


OPEN_DOCUMENTS = frozenset({EventLine})  # may carry keys beyond their fields
DOCUMENTS: dict[str, type[Document]] = {
    "peek --json": PeekDocument,
    "status --json": StatusDocument,
    "status --all --json": HostDocument,
    "doctor --json": DoctorDocument,
    "stop --json": StopDocument,
    "plugins list --json": PluginsDocument,
    "rescue --json": RescueDocument,
    "events --json": EventLine,
}


def to_json(value: Any) -> Any:
    """Dataclasses as objects (keys in declaration order), tuples as arrays; the rest as is."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


def _strip(tp: Any) -> Any:
    return get_args(tp)[0] if get_origin(tp) is Annotated else tp


def _doc(tp: Any) -> str:
    return str(get_args(tp)[1]) if get_origin(tp) is Annotated else ""


def _arms(tp: Any) -> tuple[Any, ...]:
    return get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)


def problems(tp: Any, value: Any, where: str = "$") -> list[str]:  # noqa: PLR0911 -- per type
    """Where `value` (parsed JSON) departs from the schema type `tp`; [] when it conforms."""
    tp = _strip(tp)
    if tp is Any:
        return []
    if len(_arms(tp)) > 1:
        found = [problems(arm, value, where) for arm in _arms(tp)]
        if all(found):
            return [f"{where}: {_short(value)} is not {describe(tp)}"]
        return []
    if is_dataclass(tp):
        return _object_problems(tp, value, where)
    origin, args = get_origin(tp), get_args(tp)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {_short(value)} is not an array"]
        return [p for i, item in enumerate(value) for p in problems(args[0], item, f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {_short(value)} is not an object"]
        return [p for k, item in value.items() for p in problems(args[1], item, f"{where}.{k}")]
    return [] if _scalar_ok(tp, value) else [f"{where}: {_short(value)} is not {describe(tp)}"]


def _object_problems(cls: Any, value: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {_short(value)} is not an object"]
    hints = _hints(cls)
    found = [f"{where}: no {name!r}" for name in hints if name not in value]
    if cls not in OPEN_DOCUMENTS:
        found += [f"{where}: unexpected key {key!r}" for key in value if key not in hints]
    for name, tp in hints.items():
        if name in value:
            found += problems(tp, value[name], f"{where}.{name}")
    return found


def _scalar_ok(tp: Any, value: Any) -> bool:
    if get_origin(tp) is Literal:
        return any(type(value) is type(choice) and value == choice for choice in get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return type(value) in (int, float) and math.isfinite(value)
    return type(value) is tp  # bool is not an int here, nor an int a bool


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def from_json(cls: type[T], value: Any) -> T | None:
    """`value` (e.g. read from state.json) as a `cls`, or None unless it conforms.

    Keys `cls` does not declare are dropped; missing ones take their defaults.
    """
    if not isinstance(value, dict):
        return None
    assert is_dataclass(cls)
    picked = {}
    for item in fields(cls):
        if item.name in value:
            picked[item.name] = value[item.name]
        elif item.default is not MISSING:
            picked[item.name] = item.default
        else:
            return None
    if problems(cls, picked):
        return None
    return cls(**picked)


def describe(tp: Any) -> str:  # noqa: PLR0911 -- one return per kind of type
    """The type as docs/json.md writes it."""
    tp = _strip(tp)
    if tp is Any:
        return "any"
    if len(_arms(tp)) > 1:
        return " or ".join(describe(arm) for arm in _arms(tp))
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return " \\| ".join(f'`"{choice}"`' for choice in args)
    if origin is list:
        return f"array of {_plural(args[0])}"
    if origin is dict:
        return f"object of {_plural(args[1])}"
    if is_dataclass(tp):
        return "object"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
    return names.get(tp, str(tp))


def _plural(tp: Any) -> str:
    text = describe(tp)
    return {"object": "objects", "string": "strings", "boolean": "booleans"}.get(text, text)


def _rows(cls: Any, prefix: str) -> list[str]:
    rows = []
    for name, tp in _hints(cls).items():
        path = f"{prefix}{name}"
        rows.append(f"| `{path}` | {describe(tp)} | {_doc(tp)} |")
        inner = [arm for arm in _arms(_strip(tp)) if arm is not type(None)]
        for arm in inner:
            origin, args = get_origin(arm), get_args(arm)
            if is_dataclass(arm):
                rows += _rows(arm, f"{path}.")
            elif origin is list and is_dataclass(args[0]):
                rows += _rows(args[0], f"{path}[].")
            elif origin is dict and is_dataclass(_strip(args[1])):
                rows += _rows(_strip(args[1]), f"{path}.<name>.")
    return rows


def render_docs() -> str:
    """docs/json.md, generated from the schemas above."""
    lines = [
        "# JSON output",
        "",
        "Generated from `agent_runner.observe.contracts` by",
        "`python -m agent_runner.observe.contracts`; a test fails when this file is stale, and",
        "the tests check every command's real output against these schemas.",
        "",
        f"Every document carries `schema_version` (now {SCHEMA_VERSION}). Within a version keys",
        "are only ever added; a key renamed, removed or given another type raises the version.",
        "Times are epoch seconds (numbers) unless named `ts`. `null` means not known or not",
        "applicable, never an error.",
    ]
    for command, cls in DOCUMENTS.items():
        summary = " ".join((cls.__doc__ or "").split())
        lines += ["", f"## `{command}`", "", summary, "", "| key | type | meaning |"]
        lines += ["| --- | --- | --- |", *_rows(cls, "")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_docs())
