"""Admission at boot (SPEC §8.5): every discovered entry gets one verdict and its events.

Order per entry: builtin → squatter event → disabled → `require` rules → files and pin →
a confined describe call. One plugin's refusal never stops the others; nothing here raises
for what a plugin is or does. The supervisor only ever holds the plugin's bytes and JSON.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from agent_runner import __version__
from agent_runner.config import PluginsConfig
from agent_runner.events import Emit
from agent_runner.plugins import wire
from agent_runner.plugins.admission.discovery import Candidate
from agent_runner.plugins.admission.trust import (
    Assessment,
    Provenance,
    assess,
    provenance,
    shared_names,
)
from agent_runner.plugins.builtin import BUILTINS
from agent_runner.plugins.parent.sandbox import CallRequest, Sandbox

FAMILY_FIELDS = {"spawn": "spawn_hooks", "dirty": "dirty_handlers", "observe": "round_observers"}
# A describe only imports and reads the manifest; N hanging plugins must not hold boot for
# N x hook_timeout_s (systemd's start timeout is 90 s by default).
DESCRIBE_TIMEOUT_S = 5.0
_HOOK_NAME = re.compile(r"[A-Za-z_]\w*", re.ASCII)
_EVENT_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")
State = Literal["builtin", "admitted", "refused", "disabled"]


@dataclass(frozen=True)
class AdmittedPlugin:
    """A third-party plugin that passed admission: everything a hook call needs.

    `sources` holds the verified bytes of its modules (path relative to the site folder ->
    bytes); every call sends exactly these, never what is on disk now, encoded once.
    """

    name: str
    dist: str
    version: str
    entry: str
    pin: str | None
    digest: str
    families: Mapping[str, tuple[str, ...]]
    event_kinds: tuple[str, ...]
    tier: str
    sources: wire.Sources = field(repr=False)

    def request(
        self,
        family: Literal["spawn", "dirty", "observe"],
        hook: str,
        view: Mapping[str, Any],
        read_roots: tuple[Path, ...] = (),
    ) -> CallRequest:
        """The sandbox request that calls `hook` of `family` with `view`."""
        return CallRequest(family, self.sources, self.entry, hook, view, read_roots)


@dataclass(frozen=True)
class Verdict:
    """One discovered entry (or builtin) as state.json, peek and `plugins list` show it."""

    name: str
    kind: Provenance
    dist: str
    version: str
    site: str
    state: State
    pin: str | None = None
    pin_state: str | None = None
    digest: str | None = None
    reason: str | None = None
    families: Mapping[str, Sequence[str]] | None = None
    event_kinds: Sequence[str] | None = None
    tier: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        data = asdict(self)
        data["families"] = None if self.families is None else dict(self.families)
        return data


@dataclass(frozen=True)
class Admission:
    """The outcome of admission: the admitted plugins and a verdict for every entry."""

    admitted: tuple[AdmittedPlugin, ...] = ()
    verdicts: tuple[Verdict, ...] = ()

    def state(self) -> list[dict[str, Any]]:
        """The verdicts as state.json keeps them."""
        return [verdict.to_dict() for verdict in self.verdicts]


def admit(
    candidates: Sequence[Candidate],
    settings: PluginsConfig,
    sandbox: Sandbox,
    emit: Emit,
    *,
    package: Path,
) -> Admission:
    """Decide every entry; emit its events; describe the plugins that may run."""
    tier = sandbox.report.tier if sandbox.report is not None else "none"
    kinds = [provenance(candidate, package) for candidate in candidates]
    shared = shared_names(candidates, kinds)
    admitted: list[AdmittedPlugin] = []
    verdicts = [builtin_verdict(name) for name in BUILTINS]
    for candidate, kind in zip(candidates, kinds, strict=True):
        if kind == "builtin":
            continue  # the static set above already stands for it
        ruling = _Ruling(candidate, kind, settings, emit)
        try:
            plugin = ruling.decide(sandbox, tier, shared.get(candidate.name, ()))
        except Exception as exc:  # a check that breaks on odd input refuses, never stops boot
            ruling.refuse(f"could not be checked: {type(exc).__name__}: {exc}"[:500])
            plugin = None
        verdicts.append(ruling.verdict)
        if plugin is not None:
            admitted.append(plugin)
    third_party = {c.name for c, kind in zip(candidates, kinds, strict=True) if kind != "builtin"}
    for name in sorted(set(settings.pin) - third_party):
        emit("plugin_pin_unused", name=name)
    return Admission(tuple(admitted), tuple(verdicts))


def builtin_verdict(name: str) -> Verdict:
    """A builtin, described in-process: it is agent-runner's own code."""
    module, _, attribute = BUILTINS[name].partition(":")
    described = wire.describe_manifest(getattr(importlib.import_module(module), attribute))
    return Verdict(
        name,
        "builtin",
        "agent-runner",
        __version__,
        "",
        "builtin",
        families=_families(described),
        event_kinds=tuple(described["event_kinds"]),
        tier="in-process",
    )


class _Refused(Exception):
    """This entry is refused; `event` False when a more specific event already said so."""

    def __init__(self, reason: str, *, event: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.event = event


class _Ruling:
    """The decision about one third-party entry and the verdict it leaves."""

    def __init__(
        self, candidate: Candidate, kind: Provenance, settings: PluginsConfig, emit: Emit
    ) -> None:
        self.candidate = candidate
        self.kind = kind
        self.settings = settings
        self.emit = emit
        self.pin = settings.pin.get(candidate.name)
        dist = candidate.dist
        self.verdict = Verdict(
            candidate.name, kind, dist.name, dist.version, str(dist.site), "refused", self.pin
        )

    def decide(
        self, sandbox: Sandbox, tier: str, shared_with: Sequence[str]
    ) -> AdmittedPlugin | None:
        """The admitted plugin, or None with the verdict and events saying why not."""
        candidate = self.candidate
        if self.kind == "squatter":
            self.emit(
                "plugin_builtin_name_squat",
                name=candidate.name,
                dist=candidate.dist.name,
                module=candidate.module,
            )
        if candidate.name in self.settings.disable:
            self.emit("plugin_disabled", name=candidate.name)
            self.verdict = replace(self.verdict, state="disabled")
            return None
        try:
            checked = self._check(shared_with)
            return self._describe(sandbox, tier, checked)
        except _Refused as refused:
            self.refuse(refused.reason, event=refused.event)
            return None

    def refuse(self, reason: str, *, event: bool = True) -> None:
        """Record the refusal; `event` False when a more specific event already said so."""
        if event:
            self.emit("plugin_refused", name=self.candidate.name, reason=reason)
        self.verdict = replace(self.verdict, state="refused", reason=reason)

    def _check(self, shared_with: Sequence[str]) -> Assessment:
        """The `require` rules (before any file is read), then the files and the pin."""
        if self.settings.sandbox == "require":
            if self.pin is None:
                raise _Refused('not pinned, and sandbox = "require" admits pinned plugins only')
            if self.kind == "squatter":
                raise _Refused('claims a builtin\'s name or module, under sandbox = "require"')
        checked = assess(self.candidate, self.pin, self.kind, shared_with)
        self.verdict = replace(self.verdict, pin_state=checked.pin_state, digest=checked.digest)
        if checked.pin_state == "mismatch":
            self.emit(
                "plugin_checksum_mismatch",
                name=self.candidate.name,
                expected=self.pin,
                actual=checked.digest,
                reason=checked.reason,
            )
            raise _Refused(f"checksum mismatch: {checked.reason}", event=False)
        if checked.verified is None:
            raise _Refused(checked.reason or "not verified")
        return checked

    def _describe(self, sandbox: Sandbox, tier: str, checked: Assessment) -> AdmittedPlugin:
        """Read the manifest in a confined child; the supervisor only sees its JSON."""
        assert checked.verified is not None
        assert checked.digest is not None
        candidate = self.candidate
        entry = candidate.value.strip()
        sources = wire.Sources(checked.verified.sources)
        timeout_s = min(self.settings.hook_timeout_s, DESCRIBE_TIMEOUT_S)
        result = sandbox.call(CallRequest("describe", sources, entry, None, {}), timeout_s)
        if result.status != "ok":
            raise _Refused(_describe_failure(result.status, result.detail))
        problem = _manifest_problem(candidate.name, result.value)
        if problem:
            raise _Refused(problem)
        families = _families(result.value)
        kinds = tuple(result.value["event_kinds"])
        self.verdict = replace(
            self.verdict, state="admitted", families=families, event_kinds=kinds, tier=tier
        )
        dist = candidate.dist
        self.emit(
            "plugin_admitted",
            name=candidate.name,
            dist=dist.name,
            version=dist.version,
            pin=self.pin,
            families={family: list(hooks) for family, hooks in families.items()},
            tier=tier,
        )
        return AdmittedPlugin(
            candidate.name,
            dist.name,
            dist.version,
            entry,
            self.pin,
            checked.digest,
            families,
            kinds,
            tier,
            sources,
        )


def _families(described: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    return {family: tuple(described[key]) for family, key in FAMILY_FIELDS.items()}


def _manifest_problem(name: str, described: Mapping[str, Any]) -> str | None:
    """What is wrong with a describe result the wire schema already accepted."""
    if described["name"] != name:
        return f"manifest name {described['name']!r} differs from the entry-point name {name!r}"
    for family, key in FAMILY_FIELDS.items():
        hooks = described[key]
        bad = [hook for hook in hooks if not _HOOK_NAME.fullmatch(hook)]
        if bad:
            return f"{family} hook name {bad[0]!r} is not an identifier"
        if len(set(hooks)) != len(hooks):
            return f"two {family} hooks share a name; each must be distinct"
    kinds = described["event_kinds"]
    bad = [kind for kind in kinds if not _EVENT_KIND.fullmatch(kind)]
    if bad:
        return f"event kind {bad[0]!r} is not lowercase letters, digits and _"
    return None


def _describe_failure(status: str, detail: str) -> str:
    missing = re.fullmatch(r"ModuleNotFoundError: No module named '([^']+)'", detail)
    if status == "raised" and missing:
        return (
            f"imports {missing.group(1)}, which plugins cannot import (only the standard "
            "library, agent_runner.plugins and the plugin's own distribution)"
        )
    return f"describe failed ({status}): {detail}"
