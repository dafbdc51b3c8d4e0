"""Hook families in the loop (SPEC §8.6-8.8): call the hooks, check their answers, count failures.

Builtins are called in-process, third-party hooks in a confined sandbox child; either way a
hook's answer is the family's plain JSON, checked here before the loop sees it. A failed call
is an event and counts toward its plugin's quarantine; nothing a hook does raises out of `Hooks`.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent_runner.config import PluginsConfig
from agent_runner.events import Emit
from agent_runner.parsers import TRANSIENT_CLASSES
from agent_runner.plugins import DirtyIntent, PluginManifest, wire
from agent_runner.plugins.admission.verdict import FAMILY_FIELDS, Admission, AdmittedPlugin
from agent_runner.plugins.builtin import BUILTINS
from agent_runner.plugins.parent.sandbox import CallResult, Sandbox

Family = Literal["spawn", "dirty", "observe"]
# A plugin event is written as emit(kind, **fields): these names are the log line's own.
RESERVED_EVENT_FIELDS = frozenset({"ts", "event", "kind"})
MIN_DEFER_S = 1.0
Call = Callable[[Family, str, Mapping[str, Any], tuple[Path, ...]], CallResult]


@dataclass(frozen=True)
class SpawnVerdict:
    """The spawn hooks' collapsed answer; `hook` is `plugin:hook` of the deciding one."""

    action: Literal["proceed", "defer", "skip"] = "proceed"
    defer_s: float = 0.0
    reason: str = ""
    hook: str | None = None


@dataclass(frozen=True)
class ObservedTransient:
    """A transient error a round observer reported, as plain data."""

    classification: str
    reset_at: float | None
    hook: str


def collapse(verdicts: Sequence[SpawnVerdict]) -> SpawnVerdict:
    """Skip beats the longest defer beats proceed (pure); the first skip names the hook."""
    for verdict in verdicts:
        if verdict.action == "skip":
            return verdict
    defers = [v for v in verdicts if v.action == "defer"]
    return max(defers, key=lambda v: v.defer_s) if defers else SpawnVerdict()


class _Target:
    """One plugin as the dispatcher sees it: its hooks, its failures, and how to call it."""

    def __init__(
        self,
        name: str,
        families: Mapping[str, Sequence[str]],
        event_kinds: Sequence[str],
        call: Call,
    ) -> None:
        self.name = name
        self.families = {family: tuple(families.get(family, ())) for family in FAMILY_FIELDS}
        self.event_kinds = frozenset(event_kinds)
        self.call = call
        self.failures = 0
        self.quarantined: str | None = None


class Hooks:
    """Every admitted plugin's hooks, per family, with failure counting and quarantine.

    Owns the sandbox: it stays up only while a third-party plugin is admitted and not
    quarantined (a quarantined plugin gets no more calls until serve restarts).
    """

    def __init__(
        self,
        admission: Admission,
        settings: PluginsConfig,
        sandbox: Sandbox | None,
        emit: Emit,
        *,
        dirty_handler: str = "builtin",
        heartbeat: Callable[[], None] = lambda: None,
        builtins: Mapping[str, PluginManifest] | None = None,
    ) -> None:
        self._admission = admission
        # Verdicts do not change after admission: copied once, not at every state save.
        self._verdict_rows = admission.state()
        self._heartbeat = heartbeat
        self._config = settings
        self._emit = emit
        self._sandbox = sandbox
        manifests = _builtin_manifests() if builtins is None else builtins
        # Apart: a squatter admitted under a builtin's name must not stand for the builtin.
        self._builtins = {name: _builtin_target(name, m) for name, m in manifests.items()}
        self._plugins = {p.name: self._confined_target(p) for p in admission.admitted}
        self._keep_sandbox_while_needed()
        self._unavailable_handlers: set[str] = set()
        for name in sorted(set(settings.settings) - {p.name for p in admission.admitted}):
            emit("plugin_settings_unused", name=name)
        if dirty_handler != "builtin":
            self.can_decide_dirty(dirty_handler)  # the boot-time warning, when it cannot

    def admitted(self) -> tuple[AdmittedPlugin, ...]:
        """The third-party plugins admitted at boot (quarantined ones too)."""
        return self._admission.admitted

    def close(self) -> None:
        """Stop the sandbox's fork server, if one runs."""
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def helper_pids(self) -> tuple[int, ...]:
        """Processes of ours that a stray sweep must spare (the fork server)."""
        return () if self._sandbox is None else self._sandbox.server_pids()

    def before_spawn(self, view: Mapping[str, Any]) -> SpawnVerdict:
        """Ask every spawn hook; a failing hook counts as proceed."""
        verdicts = []
        for target, hook in self._hooks("spawn"):
            label = f"{target.name}:{hook}"
            value = self._call(target, "spawn", hook, {**view, "settings": self._settings(target)})
            if value is None:
                continue
            action, defer_s = value["action"], float(value["defer_s"])
            if action == "defer" and not MIN_DEFER_S <= defer_s <= self._config.max_defer_s:
                limits = f"{MIN_DEFER_S:g}..{self._config.max_defer_s:g}"
                self._failed(
                    target, label, "invalid_result", f"defer_s {defer_s:g} not in {limits}"
                )
                continue
            self._succeeded(target)
            if action == "proceed":
                continue
            if not self._may_override(target.name, hook):
                self._emit("plugin_spawn_override_ignored", hook=label, action=action)
                continue
            verdict = SpawnVerdict(
                action, defer_s if action == "defer" else 0.0, value["reason"], label
            )
            self._emit(
                "plugin_spawn_decision",
                hook=label,
                action=action,
                defer_s=verdict.defer_s,
                reason=verdict.reason,
            )
            verdicts.append(verdict)
        return collapse(verdicts)

    def has(self, family: Family) -> bool:
        """Whether any plugin that is not quarantined has a hook of `family`."""
        return next(self._hooks(family), None) is not None

    def can_decide_dirty(self, name: str) -> bool:
        """Whether plugin `name` is admitted with a dirty handler (quarantined or not).

        The first time a name is not, `dirty_handler_unavailable` says so: the builtin acts.
        """
        target = self._plugins.get(name)
        if target is not None and target.families["dirty"]:
            return True
        if name not in self._unavailable_handlers:
            self._unavailable_handlers.add(name)
            reason = "it has no dirty handler" if target is not None else self._not_admitted(name)
            self._emit("dirty_handler_unavailable", name=name, reason=reason)
        return False

    def decide_dirty(
        self,
        name: str,
        view: Mapping[str, Any],
        *,
        read_roots: tuple[Path, ...],
        problem: Callable[[DirtyIntent], str | None],
    ) -> DirtyIntent | str:
        """Plugin `name`'s intent for the dirty tree, or why there is none (use the builtin).

        `problem` is the executor's own check of an intent; a plugin whose intent fails it
        has failed the call.
        """
        if not self.can_decide_dirty(name):
            return f"{name} is not an admitted plugin with a dirty handler"
        target = self._plugins[name]
        if target.quarantined is not None:
            return f"{name} is quarantined"
        hook = target.families["dirty"][0]
        label = f"{name}:{hook}"
        call_view = {**view, "settings": self._settings(target)}
        value = self._call(target, "dirty", hook, call_view, read_roots)
        if value is None:
            return f"{label} failed"
        intent = DirtyIntent(value["action"], value["message"], tuple(value["paths"]))
        why = problem(intent)
        if why is not None:
            self._failed(target, label, "invalid_result", why)
            return f"{label}: {why}"
        self._succeeded(target)
        return intent

    def after_round(self, view: Mapping[str, Any]) -> list[ObservedTransient]:
        """Call every round observer; write their declared events; return their transients."""
        found = []
        for target, hook in self._hooks("observe"):
            label = f"{target.name}:{hook}"
            value = self._call(
                target, "observe", hook, {**view, "settings": self._settings(target)}
            )
            if value is None:
                continue
            problems = []
            for kind, fields in value["events"]:
                problem = self._event_problem(target, kind, fields)
                if problem is None:
                    self._emit(f"{target.name}.{kind}", **fields)
                else:
                    problems.append(problem)
            transient = value["transient"]
            if transient is not None:
                if transient["classification"] in TRANSIENT_CLASSES:
                    reset_at = transient["reset_at"]
                    found.append(
                        ObservedTransient(
                            transient["classification"],
                            None if reset_at is None else float(reset_at),
                            label,
                        )
                    )
                else:
                    problems.append(
                        f"unknown transient classification {transient['classification']!r}"
                    )
            if problems:
                self._failed(target, label, "invalid_result", "; ".join(dict.fromkeys(problems)))
            else:
                self._succeeded(target)
        return found

    def state(self) -> list[dict[str, Any]]:
        """Every verdict as state.json keeps it, with failures and quarantine as they are now."""
        rows = []
        for row in self._verdict_rows:
            targets = self._builtins if row["kind"] == "builtin" else self._plugins
            target = targets.get(row["name"])
            now: dict[str, Any] = {"failures": 0}
            if target is not None and row["state"] in ("admitted", "builtin"):
                now["failures"] = target.failures
                if target.quarantined is not None:
                    now |= {"state": "quarantined", "reason": target.quarantined}
            rows.append({**row, **now})
        return rows

    def _confined_target(self, plugin: AdmittedPlugin) -> _Target:
        def call(
            family: Family, hook: str, view: Mapping[str, Any], read_roots: tuple[Path, ...]
        ) -> CallResult:
            if self._sandbox is None:
                return CallResult("crash", None, "sandbox not started", None, None, "")
            return self._sandbox.call(plugin.request(family, hook, view, read_roots))

        return _Target(plugin.name, plugin.families, plugin.event_kinds, call)

    def _keep_sandbox_while_needed(self) -> None:
        """The fork server runs only while some admitted plugin may still be called."""
        if self._sandbox is not None and all(
            target.quarantined is not None for target in self._plugins.values()
        ):
            self.close()

    def _hooks(self, family: Family) -> Iterator[tuple[_Target, str]]:
        for target in [*self._builtins.values(), *self._plugins.values()]:
            for hook in target.families[family]:
                if target.quarantined is None:
                    yield target, hook

    def _settings(self, target: _Target) -> dict[str, Any]:
        return dict(self._config.settings.get(target.name, {}))

    def _may_override(self, plugin: str, hook: str) -> bool:
        allowed = self._config.spawn_override_allow
        return plugin in allowed or f"{plugin}:{hook}" in allowed

    def _not_admitted(self, name: str) -> str:
        for verdict in self._admission.verdicts:
            if verdict.name == name:
                return f"{verdict.state}" + (f": {verdict.reason}" if verdict.reason else "")
        return "no installed plugin has this name"

    def _event_problem(self, target: _Target, kind: str, fields: Mapping[str, Any]) -> str | None:
        if kind not in target.event_kinds:
            return f"event kind {kind!r} is not declared in the manifest"
        reserved = sorted(RESERVED_EVENT_FIELDS & set(fields))
        if reserved:
            return f"event field {reserved[0]!r} is reserved"
        return None

    def _call(
        self,
        target: _Target,
        family: Family,
        hook: str,
        view: Mapping[str, Any],
        read_roots: tuple[Path, ...] = (),
    ) -> Any:
        """The call's checked value, or None after its failure was counted."""
        # Each call may take hook_timeout_s: a watchdog must hear from us between two.
        self._heartbeat()
        result = target.call(family, hook, view, read_roots)
        if result.status == "ok":
            return result.value
        label = f"{target.name}:{hook}"
        if result.status == "sandbox_kill":
            self._emit(
                "plugin_sandbox_kill", hook=label, signal=result.signal, syscall=result.syscall
            )
        elif result.status == "timeout":
            self._emit("plugin_call_timeout", hook=label, timeout_s=self._config.hook_timeout_s)
        self._failed(target, label, result.status, result.detail)
        return None

    def _failed(self, target: _Target, label: str, cause: str, detail: str) -> None:
        self._emit("hook_failed", hook=label, plugin=target.name, cause=cause, detail=detail[:500])
        target.failures += 1
        if target.quarantined is None and target.failures >= self._config.quarantine_after:
            target.quarantined = (
                f"{target.failures} failed calls in a row; the last: {label} {cause}"
            )
            self._emit("plugin_quarantined", name=target.name, reason=target.quarantined)
            self._keep_sandbox_while_needed()

    def _succeeded(self, target: _Target) -> None:
        target.failures = 0


def _builtin_manifests() -> dict[str, PluginManifest]:
    manifests = {}
    for name, value in BUILTINS.items():
        module, _, attribute = value.partition(":")
        manifests[name] = getattr(importlib.import_module(module), attribute)
    return manifests


def _builtin_target(name: str, manifest: PluginManifest) -> _Target:
    """A builtin: its hooks run in this process, and their answers pass the same checks."""
    hooks = {family: getattr(manifest, field) for family, field in FAMILY_FIELDS.items()}

    def call(
        family: Family, hook: str, view: Mapping[str, Any], read_roots: tuple[Path, ...]
    ) -> CallResult:
        function = next(h for h in hooks[family] if h.__name__ == hook)
        try:
            answer = function(types.SimpleNamespace(**view))
            value = wire.validate_value(family, wire.result_to_json(family, answer))
        except wire.WireError as exc:
            return CallResult("invalid_result", None, str(exc)[:500], None, None, "")
        except Exception as exc:  # a builtin's bug is a failed call, like anyone else's
            return CallResult("raised", None, f"{type(exc).__name__}: {exc}"[:500], None, None, "")
        return CallResult("ok", value, "", None, None, "")

    families = {family: [h.__name__ for h in functions] for family, functions in hooks.items()}
    return _Target(name, families, manifest.event_kinds, call)
