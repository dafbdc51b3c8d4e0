"""`agent-runner doctor`: pre-flight checks, each ok / warn / fail with a fix. Read-only.

The boot checks are serve's own (`supervisor/boot/checks.py`); the rest are what doctor adds:
setup warnings, git, a running serve, the systemd unit, the sandbox, each plugin.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent_runner import vcs
from agent_runner.config import Config, load_config
from agent_runner.errors import AgentRunnerError, ConfinementUnavailable, GitError
from agent_runner.observe.contracts import (
    ALIVE_STATES,
    Check,
    DoctorDocument,
    DoctorSandbox,
    PluginEntry,
)
from agent_runner.observe.host import host_report
from agent_runner.observe.peek import budget_block, describe_reaping
from agent_runner.observe.pluginlist import plugin_rows
from agent_runner.plugins.admission import discovery
from agent_runner.plugins.parent.sandbox import Sandbox
from agent_runner.supervisor.agent import landlock
from agent_runner.supervisor.agent.cgroup import CgroupUnavailable, place
from agent_runner.supervisor.agent.writepolicy import exposed_inputs, verdict, write_rules
from agent_runner.supervisor.boot.checks import BOOT_CHECKS, CheckResult, Status, notify_program
from agent_runner.supervisor.boot.instance import project_key, read_holder
from agent_runner.supervisor.loop.state import read_state
from agent_runner.systemd.state import unit_drift, unit_state

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SHOWN: dict[Status, str] = {"ok": "ok", "warn": "warn", "fail": "FAIL"}


@dataclass
class Diagnosis:
    """Every check's result, what the sandbox probe found, and the plugins as doctor saw them."""

    checks: list[CheckResult] = field(default_factory=list)
    config_loaded: bool = True
    sandbox: DoctorSandbox | None = None
    plugins: list[PluginEntry] = field(default_factory=list)

    def document(self) -> DoctorDocument:
        return DoctorDocument(
            ok=not failed(self.checks),
            checks=[Check(**asdict(check)) for check in self.checks],
            sandbox=self.sandbox,
            plugins=self.plugins,
        )


def diagnose(config_path: Path | None, *, sandbox: bool = True) -> Diagnosis:
    """Every check; a config that does not load stops the list there, since the rest need it."""
    try:
        config = load_config(config_path)
    except AgentRunnerError as exc:
        fix = "fix the named key, or run `agent-runner init`"
        return Diagnosis([CheckResult("config", "fail", str(exc), fix)], config_loaded=False)
    found = Diagnosis([CheckResult("config", "ok", str(config.path))])
    found.checks.extend(check.run(config) for check in BOOT_CHECKS)
    found.plugins = plugin_rows(config)
    probes: list[Callable[[Config], Iterator[CheckResult]]] = [
        _agent_setup,
        _agent_confinement,
        _git,
        _secured_work,
        _silence_watchdog,
        _spend_caps,
        _notify,
        _serve_running,
        _host,
        _reaping,
        _systemd_unit,
    ]
    for probe in probes:
        found.checks.extend(probe(config))
    if sandbox:
        found.checks.extend(_sandbox(config, found))
    found.checks.extend(_plugins(config, found.plugins))
    return found


def failed(checks: list[CheckResult]) -> list[CheckResult]:
    """The checks that make doctor exit 1 (and `install` refuse)."""
    return [check for check in checks if check.status == "fail"]


def render_checks(checks: list[CheckResult]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{_SHOWN[check.status]:<4}  {check.name}: {check.detail}")
        if check.fix and check.status != "ok":
            lines.append(f"      fix: {check.fix}")
    return "\n".join(lines)


def _agent_setup(config: Config) -> Iterator[CheckResult]:
    """Setup problems the CLI named by agent.parser is known to stop on in every round."""
    env = {**os.environ, **config.agent.env}
    if config.agent.parser == "gemini":
        yield from _gemini_setup(config, env)
    elif config.agent.parser == "aider":
        yield from _aider_setup(config)


def _gemini_setup(config: Config, env: Mapping[str, str]) -> Iterator[CheckResult]:
    command = config.agent.command
    if "--skip-trust" not in command and env.get("GEMINI_CLI_TRUST_WORKSPACE") != "true":
        yield CheckResult(
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
        yield CheckResult(
            "agent setup",
            "warn",
            "GOOGLE_GEMINI_BASE_URL is set and no auth type is configured: gemini exits 41"
            ' "Invalid auth method selected"',
            'set security.auth.selectedType = "gemini-api-key" in ~/.gemini/settings.json',
        )
    elif not any(env.get(k) for k in ("GEMINI_API_KEY", "GOOGLE_API_KEY")) and not any(
        env.get(k) == "true" for k in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA")
    ):
        yield CheckResult(
            "agent setup",
            "warn",
            "gemini has no auth method: neither settings.json nor GEMINI_API_KEY names one"
            " (exit 41)",
            "set GEMINI_API_KEY in agent.env, or log in once with `gemini` interactively",
        )


def _aider_setup(config: Config) -> Iterator[CheckResult]:
    work_dir = config.runtime.work_dir
    if not vcs.is_work_tree(work_dir):
        return
    try:
        vcs.run_git(work_dir, "check-ignore", "-q", "--no-index", ".aider.tags.cache.v4")
    except GitError:
        yield CheckResult(
            "agent setup",
            "warn",
            "aider writes .aider.tags.cache.v4/ into the work tree and git does not ignore it:"
            " every round leaves the tree dirty",
            "add '.aider*' to the repository's .git/info/exclude (or to .gitignore)",
        )


def _agent_confinement(config: Config) -> Iterator[CheckResult]:
    """The effective `[agent] confine` policy on this kernel; a recommendation when it is off."""
    mode = config.agent.confine
    decided = verdict(mode, landlock.abi_version())
    if mode == "off":
        yield CheckResult(
            "agent confinement",
            "warn",
            "off: the agent may write wherever its uid can (your home, other projects)",
            'set agent.confine = "workdir" (docs/agents.md: what it protects and what not)',
        )
        return
    if decided.action == "refuse":
        return  # the boot check "agent confinement" fails with the reason
    if decided.action == "unconfined":
        yield CheckResult(
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
    yield CheckResult(
        "agent confinement",
        "ok",
        f"{mode} (Landlock ABI {landlock.abi_version()}): writes only beneath: {beneath}",
    )
    for path in exposed_inputs(config):
        yield CheckResult(
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


def _git(config: Config) -> Iterator[CheckResult]:
    work_dir = config.runtime.work_dir
    if not work_dir.is_dir():
        return  # the boot check has said so
    if not vcs.is_work_tree(work_dir):
        yield CheckResult(
            "git",
            "warn",
            f"{work_dir} is not a git work tree: dirty work is not secured",
            "run `git init` there",
        )
    else:
        yield CheckResult("git", "ok", f"{work_dir} (HEAD {vcs.head_sha(work_dir) or 'none yet'})")


def _secured_work(config: Config) -> Iterator[CheckResult]:
    try:
        kept = vcs.list_kept(vcs.open_repo(config.runtime.work_dir))
    except GitError:
        return  # the work tree check has said why
    days = config.vcs.rescue_keep_days
    pruning = f"each pruned {days:g} days after it was made" if days else "kept forever"
    if not kept:
        yield CheckResult(
            "secured work", "ok", f"none kept under {vcs.KEPT_PREFIX} yet ({pruning})"
        )
        return
    rounds = [k.record["round"] for k in kept]
    yield CheckResult(
        "secured work",
        "ok",
        f"{len(kept)} piece(s) under {vcs.KEPT_PREFIX} (rounds {min(rounds)}..{max(rounds)},"
        f" {pruning}): `agent-runner rescue` lists them",
    )


def _silence_watchdog(config: Config) -> Iterator[CheckResult]:
    runtime = config.runtime
    idle = runtime.idle_timeout_s
    if idle == 0:
        yield CheckResult("silence watchdog", "ok", "off (runtime.idle_timeout_s = 0)")
        return
    if idle >= runtime.round_budget_s:
        yield CheckResult(
            "silence watchdog",
            "warn",
            f"idle_timeout_s ({idle:g}) is not shorter than round_budget_s "
            f"({runtime.round_budget_s:g}): the budget always ends a silent round first",
            "lower runtime.idle_timeout_s, or set it to 0",
        )
        return
    command = config.agent.command
    if config.agent.parser == "gemini" and "stream-json" not in command:
        yield CheckResult(
            "silence watchdog",
            "warn",
            "gemini --output-format json prints its answer only when it is done: a turn longer"
            f" than {idle:g}s looks silent and is ended",
            'use "--output-format", "stream-json" (same parser), or raise runtime.idle_timeout_s',
        )
        return
    yield CheckResult("silence watchdog", "ok", f"a round silent for {idle:g}s is ended")


def _spend_caps(config: Config) -> Iterator[CheckResult]:
    caps = {k: v for k, v in asdict(config.budget).items() if v is not None}
    report = budget_block(
        config,
        read_state(config.runtime.log_dir),
        running=read_holder(config.runtime.log_dir) is not None,
        now=time.time(),
    )
    day = report.last_24h
    used = (
        f"last 24 h: {day.rounds} rounds, {day.tokens} tokens, ${day.cost_usd:g}"
        " as the CLI reported"
    )
    if not caps:
        yield CheckResult("spend caps", "ok", f"none set ([budget]); {used}")
        return
    listed = ", ".join(f"{k} = {v:g}" for k, v in caps.items())
    waiting = report.waiting
    if waiting is not None:
        yield CheckResult(
            "spend caps",
            "warn",
            f"{listed}; {used}; serve is waiting: {waiting.cap} reached "
            f"({waiting.used:g} of {waiting.limit:g}), {waiting.remaining_s:g}s left",
            f"wait, or raise budget.{waiting.cap} (applies within seconds)",
        )
        return
    yield CheckResult("spend caps", "ok", f"{listed}; {used}")


def _host(config: Config) -> Iterator[CheckResult]:
    report = host_report()
    mine, tree = str(config.runtime.log_dir), str(config.runtime.work_dir)
    alive = [p for p in report.projects if p.supervisor.state in ALIVE_STATES]
    same_tree = [p for p in alive if p.log_dir != mine and p.work_dir == tree]
    if same_tree:
        other = same_tree[0]
        yield CheckResult(
            "projects on this host",
            "fail",
            f"another serve (pid {other.supervisor.pid}, log_dir {other.log_dir}) runs in this"
            " work_dir: two agents would share one tree",
            "stop it, or give the projects different work_dirs",
        )
        return
    yield CheckResult(
        "projects on this host",
        "ok",
        f"{len(report.projects)} with state under {report.state_home} or installed, "
        f"{len(alive)} running: `agent-runner status --all`",
    )


def _notify(config: Config) -> Iterator[CheckResult]:
    """What the boot check cannot see: the command inside work_dir, or failing when it ran."""
    notify = config.notify
    found = notify_program(config) if notify.command else None
    if found is None or found.path is None:
        return  # off, or the boot check has said why it cannot start
    if found.path.resolve().is_relative_to(config.runtime.work_dir):
        yield CheckResult(
            "notify runs",
            "warn",
            f"{found.path} lives in work_dir, which the agent can rewrite (it runs unconfined)",
            "keep the notify command outside work_dir",
        )
    last = _dict(read_state(config.runtime.log_dir).get("notify")).get("last")
    if isinstance(last, dict) and last.get("ok") is False:
        yield CheckResult(
            "notify runs",
            "warn",
            f"its last run failed: {last.get('reason')}",
            "run it by hand with an event on stdin: `agent-runner events --json | tail -1 | CMD`",
        )


def _systemd_unit(config: Config) -> Iterator[CheckResult]:
    state = unit_state(config)
    if state is None:
        yield CheckResult("systemd unit", "ok", "not installed; serve runs in the foreground")
        return
    yield CheckResult(
        "systemd unit",
        "ok",
        f"{state['unit']} ({state['scope']}): {state['active']}, {state['enabled']}",
    )
    drift = unit_drift(config, state["scope"])
    if drift:
        again = "agent-runner install" + (" --system" if state["scope"] == "system" else "")
        yield CheckResult(
            "systemd unit files",
            "warn",
            "differ from what install writes now: " + ", ".join(drift),
            f"run `{again}` again (then restart the unit)",
        )


def _serve_running(config: Config) -> Iterator[CheckResult]:
    holder = read_holder(config.runtime.log_dir)
    if holder is None:
        yield CheckResult("serve", "ok", "not running")
    else:
        yield CheckResult(
            "serve", "warn", f"already running (pid {holder.pid})", "`agent-runner stop` first"
        )


def _reaping(config: Config) -> Iterator[CheckResult]:
    """How rounds' leftovers are killed: what a running serve uses, else what this shell gets."""
    fallback_fix = (
        "run serve under the systemd unit (Delegate=yes gives it a cgroup), or as a user "
        "allowed to create cgroups; until then the subreaper and scans are used"
    )
    state = read_state(config.runtime.log_dir) if read_holder(config.runtime.log_dir) else {}
    reaping = state.get("reaping")
    if isinstance(reaping, dict):
        status: Status = "ok" if reaping.get("mode") == "cgroup" else "warn"
        yield CheckResult(
            "reaping", status, f"serve uses {describe_reaping(reaping)}", fallback_fix
        )
        return
    if config.runtime.round_cgroup == "off":
        reason = 'runtime.round_cgroup is "off"'
    else:
        try:
            placement = place(project_key(config.runtime.work_dir))
        except CgroupUnavailable as exc:
            reason = str(exc)
        else:
            yield CheckResult(
                "reaping",
                "ok",
                f"a cgroup per round under {placement.base} (for a serve started from here)",
            )
            return
    yield CheckResult(
        "reaping",
        "warn",
        describe_reaping({"mode": "fallback", "reason": reason}),
        fallback_fix,
    )


def _sandbox(config: Config, found: Diagnosis) -> Iterator[CheckResult]:
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
            # serve refuses to boot with these very words (exit 78).
            achieved = degraded[0] if degraded else {}
            found.sandbox = DoctorSandbox(
                mode=mode,
                tier=achieved.get("achieved_tier"),
                landlock_abi=None,
                fs=None,
                net=None,
                scope=None,
                seccomp=None,
                unconfined_reason=achieved.get("reason"),
                self_test=None,
            )
            yield CheckResult(
                "sandbox", "fail", str(exc), 'fix the host, or set plugins.sandbox = "prefer"'
            )
            return
        found.sandbox = DoctorSandbox(mode=mode, **report.to_dict(), self_test=None)
        enforced = ", ".join(k for k in ("fs", "net", "scope", "seccomp") if getattr(report, k))
        detail = (
            f"tier {report.tier} (Landlock ABI {report.landlock_abi}; "
            f"enforced: {enforced or 'nothing'})"
        )
        if mode == "off":
            yield CheckResult(
                "sandbox",
                "warn",
                f'{detail}; plugins run UNCONFINED (sandbox = "off")',
                'set plugins.sandbox = "prefer" or "require"',
            )
        elif report.tier != "full":
            yield CheckResult(
                "sandbox",
                "warn",
                f"{detail}: {report.unconfined_reason}",
                "use a kernel with Landlock (>= 5.13) and install libseccomp2",
            )
        else:
            yield CheckResult("sandbox", "ok", detail)
        if mode == "off":
            return
        results = sandbox.self_test()
        found.sandbox = DoctorSandbox(mode=mode, **report.to_dict(), self_test=results)
        open_ops = [op for op, blocked in results.items() if not blocked]
        summary = ", ".join(
            f"{op} {'blocked' if blocked else 'NOT blocked'}" for op, blocked in results.items()
        )
        if open_ops:
            yield CheckResult(
                "sandbox self-test",
                "fail",
                summary,
                "a confined plugin could do: " + ", ".join(open_ops),
            )
        else:
            yield CheckResult("sandbox self-test", "ok", summary)
    finally:
        sandbox.close()


def _plugins(config: Config, rows: list[PluginEntry]) -> Iterator[CheckResult]:
    """Each plugin's provenance, pin and digest, as admission at the next boot will see them."""
    require = config.plugins.sandbox == "require"
    for row in rows:
        yield _plugin_check(row, require)
    ignored = sorted({c.name for c in discovery.inside_work_dir(config.runtime.work_dir)})
    if ignored:
        yield CheckResult(
            "plugin search path",
            "warn",
            f"ignored inside work_dir (the agent can write there): {', '.join(ignored)}",
            "install agent-runner and its plugins into an environment outside work_dir",
        )
    discovered = {row.name for row in rows}
    for name in sorted(set(config.plugins.pin) - discovered):
        yield CheckResult(
            f"plugin {name}",
            "warn",
            "plugins.pin names a plugin that is not installed",
            f"remove plugins.pin.{name}, or install the plugin",
        )
    yield _dirty_handler(config.vcs.dirty_handler, rows)


def _dirty_handler(name: str, rows: list[PluginEntry]) -> CheckResult:
    """Whether the plugin `[vcs] dirty_handler` names can decide, as serve will find at boot."""
    if name == "builtin":
        return CheckResult("dirty handler", "ok", "builtin")
    row = next((r for r in rows if r.name == name and r.kind == "third-party"), None)
    fix = f'install and pin {name}, or set vcs.dirty_handler = "builtin"'
    if row is None:
        problem = "no third-party plugin of that name is installed"
    elif row.state in ("disabled", "refused", "quarantined"):
        problem = f"it is {row.state}" + (f": {row.reason}" if row.reason else "")
    elif row.pin_state in ("mismatch", "refused"):
        problem = f"it will be refused ({row.pin_state})"
    elif row.families is not None and not row.families.get("dirty"):
        problem = "it has no dirty handler"
    else:
        decided = "admitted" if row.state == "admitted" else "once serve admits it"
        return CheckResult("dirty handler", "ok", f"plugin {name} ({decided})")
    return CheckResult(
        "dirty handler",
        "warn",
        f"vcs.dirty_handler = {name!r}, but {problem}: serve uses the builtin",
        fix,
    )


def _plugin_check(row: PluginEntry, require: bool) -> CheckResult:  # noqa: PLR0911 - one per verdict
    name, state = f"plugin {row.name}", row.pin_state
    about = f"{row.kind} {row.dist} {row.version}"
    if row.kind == "builtin":
        return CheckResult(name, "ok", f"{about}, runs in-process")
    if row.state == "disabled":
        return CheckResult(name, "ok", f"{about}, disabled (never read)")
    digest = f"digest {row.digest}" if row.digest else "no digest"
    if row.kind == "squatter":
        return CheckResult(
            name,
            "fail",
            f"{about} claims a builtin's name or agent-runner's package ({digest})",
            f"uninstall {row.dist}",
        )
    pin_fix = f"`agent-runner plugins pin {row.name}` once you trust these files"
    if row.digest:
        pin_fix += f", or add to [plugins.pin]: {pin_line(row.name, row.digest)}"
    if state == "refused":
        return CheckResult(name, "fail", f"{about}: refused: {row.reason}", f"uninstall {row.dist}")
    if state == "mismatch":
        return CheckResult(
            name,
            "fail",
            f"{about}: does not match its pin {row.pin}: {row.reason}; {digest}",
            f"reinstall the pinned files, or {pin_fix}",
        )
    if state == "unpinned":
        status: Status = "fail" if require else "warn"
        return CheckResult(name, status, f"{about}: not pinned; {digest}", pin_fix)
    return CheckResult(name, "ok", f"{about}: pin verified; {digest}")


def pin_line(name: str, digest: str) -> str:
    """The `[plugins.pin]` line for `name`, ready to paste (the key quoted when TOML needs it)."""
    key = name if _BARE_KEY.fullmatch(name) else json.dumps(name)
    return f'{key} = "{digest}"'
