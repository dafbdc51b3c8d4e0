"""Admission against tampered installs: the verified bytes are the bytes that run.

Real wheels installed with pip, the real confined sandbox; files are swapped, planted,
replaced by links and FIFOs after install, and each case is refused or never executed.
"""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_runner.config import PluginsConfig, parse_config
from agent_runner.plugins.admission.discovery import discover
from agent_runner.plugins.admission.trust import assess_all, running_package
from agent_runner.plugins.admission.verdict import Admission, admit
from agent_runner.plugins.parent.sandbox import Sandbox
from tests.conftest import PluginInstalls
from tests.fakes import RecordedEvents

VIEW = {"round": 1, "settings": {}}
GENUINE = "the verified helper"
UNUSED_UID = 54_321


def settings(**plugins: Any) -> PluginsConfig:
    document = {"schema_version": 1, "agent": {"command": ["true"], "parser": "none"}}
    return parse_config({**document, "plugins": plugins}, Path("/nonexistent.toml")).plugins


def admit_site(site: Path, box: Sandbox, **plugins: Any) -> tuple[Admission, RecordedEvents]:
    """Discover and admit what `site` holds; `plugins` is the [plugins] table."""
    events = RecordedEvents()
    admission = admit(discover([site]), settings(**plugins), box, events, package=running_package())
    return admission, events


def spawn_reason(sandbox: Sandbox, admission: Admission) -> str:
    (plugin,) = admission.admitted
    result = sandbox.call(plugin.request("spawn", "office_hours", VIEW))
    assert result.status == "ok", result
    return str(result.value["reason"])


def digest_of(site: Path) -> str | None:
    (checked,) = assess_all(discover([site]), {}, running_package())
    return checked.digest


def test_a_module_swapped_after_admission_never_runs(
    confined: Sandbox, plugin_installs: PluginInstalls, tmp_path: Path
) -> None:
    site = plugin_installs.site(tmp_path / "site", "good_plugin")
    admission, _ = admit_site(site, confined)
    helpers = site / "good_plugin" / "helpers.py"
    helpers.write_text('REASON = "swapped after admission"\n')
    shutil.rmtree(site / "good_plugin" / "__pycache__")
    assert spawn_reason(confined, admission) == GENUINE
    # The swap is real: admitting again now refuses the plugin.
    again, events = admit_site(site, confined)
    assert again.admitted == ()
    assert (
        "helpers.py: does not match the hash in RECORD" in events.of("plugin_refused")[0]["reason"]
    )


def plant_pyc(module: Path, source: str) -> Path:
    """A cache file for `module` compiled from `source`, valid for `module` as it is now."""
    info = module.stat()
    code = compile(source, str(module), "exec")
    data = bytearray(importlib.util.MAGIC_NUMBER)
    data += (0).to_bytes(4, "little")  # flags: a timestamp-checked cache file
    data += (int(info.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    data += (info.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    data += marshal.dumps(code)
    cache = Path(importlib.util.cache_from_source(str(module)))
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(bytes(data))
    newer = info.st_mtime + 3600
    os.utime(cache, (newer, newer))
    return cache


def test_a_planted_pyc_never_runs(
    confined: Sandbox, plugin_installs: PluginInstalls, tmp_path: Path
) -> None:
    site = plugin_installs.site(tmp_path / "site", "good_plugin")
    pinned = digest_of(site)
    helpers = site / "good_plugin" / "helpers.py"
    plant_pyc(helpers, 'REASON = "a planted cache file ran"\n')
    ordinary = subprocess.run(
        [sys.executable, "-c", "import good_plugin.helpers as h; print(h.REASON)"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert ordinary.stdout.strip() == "a planted cache file ran"  # a plain import would use it
    # Caches are outside the digest: the pin still holds, and the source is what runs.
    assert digest_of(site) == pinned
    admission, events = admit_site(site, confined, sandbox="require", pin={"good_plugin": pinned})
    assert [e["name"] for e in events.of("plugin_admitted")] == ["good_plugin"]
    assert spawn_reason(confined, admission) == GENUINE


def test_a_plugin_that_never_finishes_importing_is_refused_and_the_rest_load(
    confined: Sandbox, plugin_installs: PluginInstalls, tmp_path: Path
) -> None:
    site = plugin_installs.site(tmp_path / "site", "hanging_plugin", "good_plugin")
    admission, events = admit_site(site, confined, hook_timeout_s=60)
    assert [(e["name"], e["reason"]) for e in events.of("plugin_refused")] == [
        ("hanging_plugin", "describe failed (timeout): no result within 5 s")
    ]
    assert [plugin.name for plugin in admission.admitted] == ["good_plugin"]


def _missing(path: Path) -> None:
    path.unlink()


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _symlink_to_same_bytes(path: Path) -> None:
    twin = path.parent.parent / "twin.py"
    shutil.copy(path, twin)
    path.unlink()
    path.symlink_to(twin)


def _symlinked_folder(path: Path) -> None:
    package = path.parent
    elsewhere = package.parent.parent / "elsewhere"
    shutil.copytree(package, elsewhere)
    shutil.rmtree(package)
    package.symlink_to(elsewhere)


def _edited(path: Path) -> None:
    path.write_text('REASON = "edited"\n')


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (_missing, "good_plugin/helpers.py: not found"),
        (_fifo, "good_plugin/helpers.py: not a regular file"),
        (_symlink_to_same_bytes, "good_plugin/helpers.py: is a symlink"),
        (_symlinked_folder, "good_plugin: is a symlink"),
        (_edited, "good_plugin/helpers.py: does not match the hash in RECORD"),
    ],
    ids=["missing", "fifo", "symlink", "symlinked-folder", "edited"],
)
def test_a_file_that_cannot_be_verified_refuses_the_plugin(
    confined: Sandbox, plugin_installs: PluginInstalls, tmp_path: Path, tamper: Any, reason: str
) -> None:
    site = plugin_installs.site(tmp_path / "site", "good_plugin", "payload_plugin")
    pinned = digest_of(plugin_installs.site(tmp_path / "pristine", "good_plugin"))
    tamper(site / "good_plugin" / "helpers.py")
    _, unpinned = admit_site(site, confined)
    assert [(e["name"], e["reason"]) for e in unpinned.of("plugin_refused")] == [
        ("good_plugin", reason)
    ]
    _, pinned_events = admit_site(site, confined, pin={"good_plugin": pinned})
    (mismatch,) = pinned_events.of("plugin_checksum_mismatch")
    assert (mismatch["expected"], mismatch["actual"], mismatch["reason"]) == (pinned, None, reason)
    # The other plugin is admitted either way.
    assert [e["name"] for e in pinned_events.of("plugin_admitted")] == ["payload_plugin"]


@pytest.fixture
def public_site(plugin_installs: PluginInstalls) -> Iterator[Path]:
    """A site folder an unprivileged uid can traverse (pytest's own tmp folders are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="agent-runner-site-"))
    root.chmod(0o755)
    try:
        yield plugin_installs.site(root / "site", "good_plugin")
    finally:
        shutil.rmtree(root)


def assess_as(uid: int, site: Path) -> list[dict[str, Any]]:
    """Discover and assess `site` in a forked child running as `uid` (no exec, no imports)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            rows = [
                {"name": a.candidate.name, "pin_state": a.pin_state, "reason": a.reason}
                for a in assess_all(discover([site]), {}, running_package())
            ]
            os.write(write_end, json.dumps(rows).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return list(json.loads(data))


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_an_unprivileged_supervisor_refuses_a_file_it_cannot_read(public_site: Path) -> None:
    helpers = public_site / "good_plugin" / "helpers.py"
    helpers.chmod(0o600)
    assert assess_as(0, public_site)[0]["pin_state"] == "unpinned"
    assert assess_as(UNUSED_UID, public_site) == [
        {
            "name": "good_plugin",
            "pin_state": "refused",
            "reason": "good_plugin/helpers.py: Permission denied",
        }
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_an_unreadable_distribution_is_reported_not_skipped(public_site: Path) -> None:
    (info,) = public_site.glob("good_plugin-*.dist-info")
    (info / "entry_points.txt").chmod(0o600)
    rows = assess_as(UNUSED_UID, public_site)
    assert rows == [
        {
            "name": info.name,
            "pin_state": "refused",
            "reason": f"{info.name}/entry_points.txt: Permission denied",
        }
    ]
