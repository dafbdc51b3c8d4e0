"""`agent-runner doctor`: pre-flight checks, each ok / warn / FAIL with a fix. Read-only."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from agent_runner import vcs
from agent_runner.config import Config, load_config, read_prompt
from agent_runner.errors import AgentRunnerError, ConfigError, ConfinementUnavailable, GitError
from agent_runner.observe.host import host_report
from agent_runner.observe.peek import budget_report, describe_reaping
from agent_runner.observe.pluginlist import plugin_rows
from agent_runner.plugins import discovery
from agent_runner.plugins.sandbox import Sandbox
from agent_runner.supervisor import landlock
from agent_runner.supervisor.agentpolicy import exposed_inputs, verdict, write_rules
from agent_runner.supervisor.boot import (
    check_log_dir,
    check_notify,
    find_agent_program,
    find_notify_program,
)
from agent_runner.supervisor.cgroup import CgroupUnavailable, place
from agent_runner.supervisor.instance import project_key, read_holder
from agent_runner.supervisor.state import read_state
from agent_runner.systemd.state import unit_drift, unit_state

Level = Literal["ok", "warn", "FAIL"]
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_checks(config_path: Path | None, *, sandbox: bool = True) -> list[Check]:
    """Every check; a broken config stops the list there, since the rest depend on it."""
    try:
        config = load_config(config_path)
    except AgentRunnerError as exc:
        return [Check("config", "FAIL", str(exc), "fix the named key, or run `agent-runner init`")]
    checks = [Check("config", "ok", str(config.path))]
    probes: list[Callable[[Config], Iterator[Check]]] = [
        _agent_command,
        _agent_setup,
        _agent_confinement,
        _prompt_files,
        _work_tree,
        _secured_work,
        _log_dir,
        _silence_watchdog,
        _spend_caps,
        _notify,
        _serve_running,
        _host,
        _reaping,
        _systemd_unit,
    ]
    if sandbox:
        probes.append(_sandbox)
    probes.append(_plugins)
    for probe in probes:
        checks.extend(probe(config))
    return checks


def failed(checks: list[Check]) -> list[Check]:
    """The checks that make doctor exit 1 (and `install` refuse)."""
    return [check for check in checks if check.level == "FAIL"]


def render_checks(checks: list[Check]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{check.level:<4}  {check.name}: {check.detail}")
        if check.fix and check.level != "ok":
            lines.append(f"      fix: {check.fix}")
    return "\n".join(lines)


def _agent_command(config: Config) -> Iterator[Check]:
    program = config.agent.command[0]
    found = find_agent_program(config)
    if found:
        yield Check("agent command", "ok", f"{program} -> {found}")
    else:
        yield Check(
            "agent command",
            "FAIL",
            f"{program!r} is not on PATH",
            "install it or set agent.command",
        )


def _agent_setup(config: Config) -> Iterator[Check]:
    """Setup problems the CLI named by agent.parser is known to stop on in every round."""
    env = {**os.environ, **config.agent.env}
    if config.agent.parser == "gemini":
        yield from _gemini_setup(config, env)
    elif config.agent.parser == "aider":
        yield from _aider_setup(config)


def _gemini_setup(config: Config, env: Mapping[str, str]) -> Iterator[Check]:
    command = config.agent.command
    if "--skip-trust" not in command and env.get("GEMINI_CLI_TRUST_WORKSPACE") != "true":
        yield Check(
            "agent setup",
            "warn",
            "gemini exits 55 in a folder not trusted interactively (and drops --yolo)",
            'add "--skip-trust" to agent.command (the gemini preset has it)',
        )
    settings = _json_file(Path(env.get("HOME", "~")).expanduser() / ".gemini" / "settings.json")
    auth = _dict(_dict(settings.get("security")).get("auth")).get("selectedType")
    if auth or settings.get("selectedAuthType"):
        return
    if env.get("GOOGLE_GEMINI_BASE_URL"):
        yield Check(
            "agent setup",
            "warn",
            "GOOGLE_GEMINI_BASE_URL is set and no auth type is configured: gemini exits 41"
            ' "Invalid auth method selected"',
            'set security.auth.selectedType = "gemini-api-key" in ~/.gemini/settings.json',
        )
    elif not any(env.get(k) for k in ("GEMINI_API_KEY", "GOOGLE_API_KEY")) and not any(
        env.get(k) == "true" for k in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA")
    ):
        yield Check(
            "agent setup",
            "warn",
            "gemini has no auth method: neither settings.json nor GEMINI_API_KEY names one"
            " (exit 41)",
            "set GEMINI_API_KEY in agent.env, or log in once with `gemini` interactively",
        )


def _aider_setup(config: Config) -> Iterator[Check]:
    work_dir = config.runtime.work_dir
    if not vcs.is_work_tree(work_dir):
        return
    try:
        vcs.run_git(work_dir, "check-ignore", "-q", "--no-index", ".aider.tags.cache.v4")
    except GitError:
        yield Check(
            "agent setup",
            "warn",
            "aider writes .aider.tags.cache.v4/ into the work tree and git does not ignore it:"
            " every round leaves the tree dirty",
            "add '.aider*' to the repository's .git/info/exclude (or to .gitignore)",
        )


def _agent_confinement(config: Config) -> Iterator[Check]:
    """The effective `[agent] confine` policy on this kernel; a recommendation when it is off."""
    mode = config.agent.confine
    decided = verdict(mode, landlock.abi_version())
    if mode == "off":
        yield Check(
            "agent confinement",
            "warn",
            "off: the agent may write wherever its uid can (your home, other projects)",
            'set agent.confine = "workdir" (docs/agents.md: what it protects and what not)',
        )
        return
    if decided.action == "refuse":
        yield Check(
            "agent confinement",
            "FAIL",
            f'"workdir" but {decided.reason}',
            'use a kernel with Landlock, or agent.confine = "workdir-if-available"',
        )
        return
    if decided.action == "unconfined":
        yield Check(
            "agent confinement",
            "warn",
            f"{mode}: the agent runs unconfined: {decided.reason}",
            "use a kernel with Landlock (>= 5.13)",
        )
        return
    groups: dict[str, list[str]] = {}
    for rule in write_rules(config):
        groups.setdefault(rule.why, []).append(_describe_rule(rule.path, rule.create))
    beneath = "; ".join(f"{why} {', '.join(paths)}" for why, paths in groups.items())
    yield Check(
        "agent confinement",
        "ok",
        f"{mode} (Landlock ABI {landlock.abi_version()}): writes only beneath: {beneath}",
    )
    for path in exposed_inputs(config):
        yield Check(
            "agent confinement",
            "warn",
            f"the agent can still write {path}: it is beneath a writable path",
            "keep agent-runner.toml and log_dir outside the work tree",
        )


def _describe_rule(path: Path, create: bool) -> str:
    if path.exists():
        return str(path)
    return f"{path} (created by serve)" if create else f"{path} (missing: not writable)"


def _json_file(path: Path) -> dict[str, Any]:
    """A small JSON settings file as a dict; {} when missing, unreadable or not an object."""
    try:
        with path.open("rb") as handle:
            value = json.loads(handle.read(1024 * 1024))
    except (OSError, ValueError):
        return {}
    return _dict(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _prompt_files(config: Config) -> Iterator[Check]:
    try:
        size = len(read_prompt(config))
    except AgentRunnerError as exc:
        yield Check("prompt files", "FAIL", str(exc), "create the file or edit prompt.files")
        return
    yield Check("prompt files", "ok", f"{len(config.prompt.files)} file(s), {size} bytes")


def _work_tree(config: Config) -> Iterator[Check]:
    work_dir = config.runtime.work_dir
    if not work_dir.is_dir():
        yield Check(
            "work tree",
            "FAIL",
            f"{work_dir} is not a directory",
            "create it or fix runtime.work_dir",
        )
    elif not vcs.is_work_tree(work_dir):
        yield Check(
            "work tree",
            "warn",
            f"{work_dir} is not a git work tree: dirty work is not secured",
            "run `git init` there",
        )
    else:
        yield Check("work tree", "ok", f"{work_dir} (HEAD {vcs.head_sha(work_dir) or 'none yet'})")


def _secured_work(config: Config) -> Iterator[Check]:
    try:
        kept = vcs.list_kept(vcs.open_repo(config.runtime.work_dir))
    except GitError:
        return  # the work tree check has said why
    days = config.vcs.rescue_keep_days
    pruning = f"each pruned {days:g} days after it was made" if days else "kept forever"
    if not kept:
        yield Check("secured work", "ok", f"none kept under {vcs.KEPT_PREFIX} yet ({pruning})")
        return
    rounds = [k.record["round"] for k in kept]
    yield Check(
        "secured work",
        "ok",
        f"{len(kept)} piece(s) under {vcs.KEPT_PREFIX} (rounds {min(rounds)}..{max(rounds)},"
        f" {pruning}): `agent-runner rescue` lists them",
    )


def _log_dir(config: Config) -> Iterator[Check]:
    log_dir = config.runtime.log_dir
    existing = next((p for p in (log_dir, *log_dir.parents) if p.exists()), Path("/"))
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        yield Check(
            "log_dir", "FAIL", f"{existing} is not a writable directory", "fix runtime.log_dir"
        )
        return
    try:
        check_log_dir(config)
    except ConfigError as exc:
        yield Check(
            "log_dir",
            "FAIL",
            str(exc).split(": ", 2)[-1],
            "add it to .gitignore or move runtime.log_dir",
        )
        return
    yield Check("log_dir", "ok", str(log_dir))


def _silence_watchdog(config: Config) -> Iterator[Check]:
    runtime = config.runtime
    idle = runtime.idle_timeout_s
    if idle == 0:
        yield Check("silence watchdog", "ok", "off (runtime.idle_timeout_s = 0)")
        return
    if idle >= runtime.round_budget_s:
        yield Check(
            "silence watchdog",
            "warn",
            f"idle_timeout_s ({idle:g}) is not shorter than round_budget_s "
            f"({runtime.round_budget_s:g}): the budget always ends a silent round first",
            "lower runtime.idle_timeout_s, or set it to 0",
        )
        return
    command = config.agent.command
    if config.agent.parser == "gemini" and "stream-json" not in command:
        yield Check(
            "silence watchdog",
            "warn",
            "gemini --output-format json prints its answer only when it is done: a turn longer"
            f" than {idle:g}s looks silent and is ended",
            'use "--output-format", "stream-json" (same parser), or raise runtime.idle_timeout_s',
        )
        return
    yield Check("silence watchdog", "ok", f"a round silent for {idle:g}s is ended")


def _spend_caps(config: Config) -> Iterator[Check]:
    caps = {k: v for k, v in asdict(config.budget).items() if v is not None}
    report = budget_report(
        config,
        read_state(config.runtime.log_dir),
        running=read_holder(config.runtime.log_dir) is not None,
        now=time.time(),
    )
    day = report["last_24h"]
    used = (
        f"last 24 h: {day['rounds']} rounds, {day['tokens']} tokens, ${day['cost_usd']:g}"
        " as the CLI reported"
    )
    if not caps:
        yield Check("spend caps", "ok", f"none set ([budget]); {used}")
        return
    listed = ", ".join(f"{k} = {v:g}" for k, v in caps.items())
    waiting = report["waiting"]
    if waiting:
        yield Check(
            "spend caps",
            "warn",
            f"{listed}; {used}; serve is waiting: {waiting['cap']} reached "
            f"({waiting['used']:g} of {waiting['limit']:g}), {waiting['remaining_s']:g}s left",
            f"wait, or raise budget.{waiting['cap']} (applies within seconds)",
        )
        return
    yield Check("spend caps", "ok", f"{listed}; {used}")


def _notify(config: Config) -> Iterator[Check]:
    notify = config.notify
    if not notify.command:
        yield Check("notify", "ok", "off ([notify] command not set)")
        return
    try:
        check_notify(config)
    except ConfigError as exc:
        yield Check("notify", "FAIL", str(exc).split(": ", 1)[-1], "fix [notify] command or on")
        return
    found = find_notify_program(config)
    detail = f"{notify.command[0]} -> {found}, on {', '.join(notify.on) or 'nothing'}"
    if found is not None and Path(found).resolve().is_relative_to(config.runtime.work_dir):
        yield Check(
            "notify",
            "warn",
            f"{detail}: it lives in work_dir, which the agent can rewrite (it runs unconfined)",
            "keep the notify command outside work_dir",
        )
        return
    last = (read_state(config.runtime.log_dir).get("notify") or {}).get("last")
    if isinstance(last, dict) and last.get("ok") is False:
        yield Check(
            "notify",
            "warn",
            f"{detail}; its last run failed: {last.get('reason')}",
            "run it by hand with an event on stdin: `agent-runner events --json | tail -1 | CMD`",
        )
        return
    yield Check("notify", "ok", detail)


def _host(config: Config) -> Iterator[Check]:
    report = host_report()
    projects = report["projects"]
    mine = str(config.runtime.log_dir)
    same_tree = [
        p
        for p in projects
        if p["running"] and p["log_dir"] != mine and p["work_dir"] == str(config.runtime.work_dir)
    ]
    if same_tree:
        other = same_tree[0]
        yield Check(
            "projects on this host",
            "FAIL",
            f"another serve (pid {other['pid']}, log_dir {other['log_dir']}) runs in this"
            " work_dir: two agents would share one tree",
            "stop it, or give the projects different work_dirs",
        )
        return
    running = sum(p["running"] for p in projects)
    yield Check(
        "projects on this host",
        "ok",
        f"{len(projects)} with state under {report['state_home']} or installed, {running}"
        " running: `agent-runner status --all`",
    )


def _systemd_unit(config: Config) -> Iterator[Check]:
    state = unit_state(config)
    if state is None:
        yield Check("systemd unit", "ok", "not installed; serve runs in the foreground")
        return
    yield Check(
        "systemd unit",
        "ok",
        f"{state['unit']} ({state['scope']}): {state['active']}, {state['enabled']}",
    )
    drift = unit_drift(config, state["scope"])
    if drift:
        again = "agent-runner install" + (" --system" if state["scope"] == "system" else "")
        yield Check(
            "systemd unit files",
            "warn",
            "differ from what install writes now: " + ", ".join(drift),
            f"run `{again}` again (then restart the unit)",
        )


def _serve_running(config: Config) -> Iterator[Check]:
    holder = read_holder(config.runtime.log_dir)
    if holder is None:
        yield Check("serve", "ok", "not running")
    else:
        yield Check(
            "serve", "warn", f"already running (pid {holder.pid})", "`agent-runner stop` first"
        )


def _reaping(config: Config) -> Iterator[Check]:
    """How rounds' leftovers are killed: what a running serve uses, else what this shell gets."""
    fallback_fix = (
        "run serve under the systemd unit (Delegate=yes gives it a cgroup), or as a user "
        "allowed to create cgroups; until then the subreaper and scans are used"
    )
    state = read_state(config.runtime.log_dir) if read_holder(config.runtime.log_dir) else {}
    reaping = state.get("reaping")
    if isinstance(reaping, dict):
        level: Level = "ok" if reaping.get("mode") == "cgroup" else "warn"
        yield Check("reaping", level, f"serve uses {describe_reaping(reaping)}", fallback_fix)
        return
    if config.runtime.round_cgroup == "off":
        reason = 'runtime.round_cgroup is "off"'
    else:
        try:
            placement = place(project_key(config.runtime.work_dir))
        except CgroupUnavailable as exc:
            reason = str(exc)
        else:
            yield Check(
                "reaping",
                "ok",
                f"a cgroup per round under {placement.base} (for a serve started from here)",
            )
            return
    yield Check(
        "reaping", "warn", describe_reaping({"mode": "fallback", "reason": reason}), fallback_fix
    )


def _sandbox(config: Config) -> Iterator[Check]:
    mode = config.plugins.sandbox
    degraded: list[dict[str, Any]] = []
    sandbox = Sandbox(
        mode,
        emit=lambda kind, **fields: degraded.append(fields),
        hook_timeout_s=config.plugins.hook_timeout_s,
    )
    try:
        try:
            report = sandbox.start()
        except ConfinementUnavailable as exc:
            yield Check(
                "sandbox", "FAIL", str(exc), 'fix the host, or set plugins.sandbox = "prefer"'
            )
            return
        enforced = ", ".join(k for k in ("fs", "net", "scope", "seccomp") if getattr(report, k))
        detail = (
            f"tier {report.tier} (Landlock ABI {report.landlock_abi}; "
            f"enforced: {enforced or 'nothing'})"
        )
        if mode == "off":
            yield Check(
                "sandbox",
                "warn",
                f'{detail}; plugins run UNCONFINED (sandbox = "off")',
                'set plugins.sandbox = "prefer" or "require"',
            )
        elif report.tier != "full":
            yield Check(
                "sandbox",
                "warn",
                f"{detail}: {report.unconfined_reason}",
                "use a kernel with Landlock (>= 5.13) and install libseccomp2",
            )
        else:
            yield Check("sandbox", "ok", detail)
        if mode == "off":
            return
        results = sandbox.self_test()
        open_ops = [op for op, blocked in results.items() if not blocked]
        summary = ", ".join(
            f"{op} {'blocked' if blocked else 'NOT blocked'}" for op, blocked in results.items()
        )
        if open_ops:
            yield Check(
                "sandbox self-test",
                "FAIL",
                summary,
                "a confined plugin could do: " + ", ".join(open_ops),
            )
        else:
            yield Check("sandbox self-test", "ok", summary)
    finally:
        sandbox.close()


def _plugins(config: Config) -> Iterator[Check]:
    """Each plugin's provenance, pin and digest, as admission at the next boot will see them."""
    require = config.plugins.sandbox == "require"
    discovered = set()
    for row in plugin_rows(config):
        discovered.add(row["name"])
        yield _plugin_check(row, require)
    ignored = sorted({c.name for c in discovery.inside_work_dir(config.runtime.work_dir)})
    if ignored:
        yield Check(
            "plugin search path",
            "warn",
            f"ignored inside work_dir (the agent can write there): {', '.join(ignored)}",
            "install agent-runner and its plugins into an environment outside work_dir",
        )
    for name in sorted(set(config.plugins.pin) - discovered):
        yield Check(
            f"plugin {name}",
            "warn",
            "plugins.pin names a plugin that is not installed",
            f"remove plugins.pin.{name}, or install the plugin",
        )


def _plugin_check(row: dict[str, Any], require: bool) -> Check:  # noqa: PLR0911 - one per verdict
    name, state = f"plugin {row['name']}", row["pin_state"]
    about = f"{row['kind']} {row['dist']} {row['version']}"
    if row["kind"] == "builtin":
        return Check(name, "ok", f"{about}, runs in-process")
    if row["state"] == "disabled":
        return Check(name, "ok", f"{about}, disabled (never read)")
    digest = f"digest {row['digest']}" if row["digest"] else "no digest"
    if row["kind"] == "squatter":
        return Check(
            name,
            "FAIL",
            f"{about} claims a builtin's name or agent-runner's package ({digest})",
            f"uninstall {row['dist']}",
        )
    pin_fix = f"`agent-runner plugins pin {row['name']}` once you trust these files"
    if row["digest"]:
        pin_fix += f", or add to [plugins.pin]: {pin_line(row['name'], row['digest'])}"
    if state == "refused":
        return Check(name, "FAIL", f"{about}: refused: {row['reason']}", f"uninstall {row['dist']}")
    if state == "mismatch":
        return Check(
            name,
            "FAIL",
            f"{about}: does not match its pin {row['pin']}: {row['reason']}; {digest}",
            f"reinstall the pinned files, or {pin_fix}",
        )
    if state == "unpinned":
        level: Level = "FAIL" if require else "warn"
        return Check(name, level, f"{about}: not pinned; {digest}", pin_fix)
    return Check(name, "ok", f"{about}: pin verified; {digest}")


def pin_line(name: str, digest: str) -> str:
    """The `[plugins.pin]` line for `name`, ready to paste (the key quoted when TOML needs it)."""
    key = name if _BARE_KEY.fullmatch(name) else json.dumps(name)
    return f'{key} = "{digest}"'
