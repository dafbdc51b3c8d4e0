"""Plugins installed for real (wheels built from tests/plugins) met by the real CLI and serve.

Every refusal has its event, and the round still runs after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PluginInstalls, build_wheel, cli_argv, install_wheel
from tests.contracts import checks_by_name, conforming
from tests.integration.conftest import REPO, Project, agent, git
from tests.pluginrun import DIGEST, cli, listed, pin, serve_once, verdicts

DOCS = Path(__file__).parents[2] / "docs" / "plugins.md"


def configure(project: Project, command: list[str] | None = None, **plugins: Any) -> None:
    project.write_config(command or agent("exits_with.py", "0"), plugins=plugins)


# --- discovery and `plugins list` ------------------------------------------------------------


def test_plugins_list_shows_provenance_pin_state_and_digest(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin", "payload_plugin")
    configure(project, pin={"payload_plugin": "sha256:" + "0" * 64})
    rows = listed(project, site)
    assert set(rows) == {"good_plugin", "payload_plugin"}
    good = rows["good_plugin"]
    assert (good["kind"], good["dist"], good["version"]) == ("third-party", "good-plugin", "1.0.0")
    assert (good["pin_state"], good["state"], good["families"]) == (
        "unpinned",
        "not_admitted",
        None,
    )
    assert DIGEST.fullmatch(good["digest"])
    assert rows["payload_plugin"]["pin_state"] == "mismatch"
    text = cli(project, "plugins", "list", before=(site,)).stdout
    assert "good_plugin  third-party  good-plugin 1.0.0" in text
    assert f"digest    {good['digest']}" in text
    assert "builtin  builtin  agent-runner" in text


def test_discovery_reads_neither_the_current_directory_nor_the_work_tree(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    configure(project)
    in_work = plugin_installs.site(project.work_dir / "vendored", "good_plugin")
    # `cli` runs in project.root, so that folder is the current directory.
    plugin_installs.site(project.root, "payload_plugin")
    done = cli(project, "plugins", "list", "--json", before=(in_work, project.root))
    names = [row["name"] for row in conforming("plugins list --json", done.stdout)["plugins"]]
    assert names == ["builtin"]
    doctor = cli(project, "doctor", "--json", before=(in_work, project.root))
    warning = checks_by_name(doctor.stdout)["plugin search path"]
    assert warning["status"] == "warn"
    assert warning["detail"].endswith("(the agent can write there): good_plugin")


def test_two_distributions_declaring_one_name_are_both_reported_and_refused(
    project: Project, plugin_installs: PluginInstalls, tmp_path: Path
) -> None:
    first = plugin_installs.site(tmp_path / "first", "good_plugin")
    second = plugin_installs.site(tmp_path / "second", "good_plugin")
    configure(project)
    done = cli(project, "plugins", "list", "--json", before=(first, second))
    rows = conforming("plugins list --json", done.stdout)["plugins"]
    rows = [row for row in rows if row["name"] == "good_plugin"]
    assert [row["site"] for row in rows] == [str(first), str(second)]
    assert all(row["pin_state"] == "refused" for row in rows)
    assert all("declared by several distributions" in row["reason"] for row in rows)
    serve_once(project, before=(first, second))
    refused = project.events("plugin_refused")
    assert [e["name"] for e in refused] == ["good_plugin", "good_plugin"]
    assert project.events("round_end")


def test_a_regular_install_of_agent_runner_proves_its_builtin_by_its_record(
    project: Project, tmp_path: Path
) -> None:
    """agent-runner installed from its wheel (not editable) in front of the editable one."""
    target = tmp_path / "regular"
    install_wheel(build_wheel(REPO, tmp_path / "wheel"), target)
    configure(project)
    done = cli(project, "plugins", "list", "--json", before=(target,))
    rows = conforming("plugins list --json", done.stdout)["plugins"]
    where = subprocess.run(
        [sys.executable, "-c", "import agent_runner; print(agent_runner.__file__)"],
        env={**os.environ, "PYTHONPATH": str(target)},
        cwd=project.root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(target / "agent_runner" / "__init__.py")
    # The running copy is the regular one; the editable copy of the venv is the other one.
    assert [(r["name"], r["kind"]) for r in rows] == [
        ("builtin", "builtin"),
        ("builtin", "squatter"),
    ]
    assert rows[1]["site"] != str(target)
    serve_once(project, before=(target,))
    squats = project.events("plugin_builtin_name_squat")
    assert [(e["name"], e["dist"]) for e in squats] == [("builtin", "agent-runner")]
    refused = project.events("plugin_refused")
    assert [e["name"] for e in refused] == ["builtin"]
    assert project.events("round_end")


# --- `plugins pin` ---------------------------------------------------------------------------

COMMENTED = """\
# The operator's notes survive byte for byte.
schema_version = 1   # required

[agent]
command = {command}
parser = "claude"    # the transcript format

[runtime]
log_dir = "{log_dir}"

[plugins]
sandbox = "prefer"

[plugins.pin]
# pinned after review, 2026-11-30
other_plugin = "sha256:{zeros}"   # keep

[plugins.settings.good_plugin]
start_hour = 9
"""


def test_plugins_pin_adds_one_line_and_keeps_everything_else(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin")
    original = COMMENTED.format(
        command=json.dumps(agent("exits_with.py", "0")), log_dir=project.log_dir, zeros="0" * 64
    )
    project.config_path.write_text(original)
    project.config_path.chmod(0o640)
    digest = pin(project, site, "good_plugin")
    after = project.config_path.read_text()
    before_lines, after_lines = original.splitlines(keepends=True), after.splitlines(keepends=True)
    added = f'good_plugin = "{digest}"\n'
    position = before_lines.index(f'other_plugin = "sha256:{"0" * 64}"   # keep\n') + 1
    assert after_lines == [*before_lines[:position], added, *before_lines[position:]]
    assert project.config_path.stat().st_mode & 0o777 == 0o640
    assert listed(project, site)["good_plugin"]["pin_state"] == "verified"


def test_plugins_pin_replaces_a_stale_pin_on_its_own_line(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin")
    stale = "sha256:" + "1" * 64
    text = 'schema_version = 1\n[agent]\ncommand = ["true"]\nparser = "none"\n'
    text += f'[runtime]\nlog_dir = "{project.log_dir}"\n'
    text += f'[plugins.pin]\n  "good_plugin"   =   "{stale}"  # upgraded later\n'
    project.config_path.write_bytes(text.replace("\n", "\r\n").encode())
    digest = pin(project, site, "good_plugin")
    expected = text.replace(stale, digest).replace("\n", "\r\n").encode()
    assert project.config_path.read_bytes() == expected
    again = cli(project, "plugins", "pin", "good_plugin", before=(site,))
    assert again.returncode == 0
    assert "already pinned" in again.stdout


def test_plugins_pin_edits_a_symlinked_config_where_it_lives(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin")
    configure(project)
    real = project.root / "configs" / "shared.toml"
    real.parent.mkdir()
    project.config_path.rename(real)
    project.config_path.symlink_to(real)
    digest = pin(project, site, "good_plugin")
    assert project.config_path.is_symlink()
    assert f'good_plugin = "{digest}"' in real.read_text()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("builtin", "claims a builtin's name or agent-runner's package; it is not pinned"),
        ("borrowed", "claims a builtin's name or agent-runner's package; it is not pinned"),
        ("nothing_here", "no installed plugin is named 'nothing_here'"),
        ("pth_plugin", "cannot be pinned: ships a .pth file"),
    ],
)
def test_plugins_pin_refuses_with_one_line_and_leaves_the_file(
    project: Project, plugin_installs: PluginInstalls, name: str, message: str
) -> None:
    site = plugin_installs.site(project.root / "site", "squatter_plugin", "pth_plugin")
    configure(project)
    before = project.config_path.read_bytes()
    done = cli(project, "plugins", "pin", name, before=(site,))
    assert done.returncode == 1
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert project.config_path.read_bytes() == before


def test_plugins_pin_refuses_the_builtin_itself(project: Project) -> None:
    configure(project)
    done = cli(project, "plugins", "pin", "builtin")
    assert done.returncode == 1
    assert "'builtin' is builtin: part of agent-runner itself, never pinned" in done.stderr


def test_the_documented_sha256sum_recipe_gives_the_pinned_digest(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin")
    configure(project)
    digest = pin(project, site, "good_plugin")
    recipe = documented_recipe()
    info_dir = next(site.glob("good_plugin-*.dist-info")).name
    done = subprocess.run(
        ["bash", "-c", recipe],
        cwd=site,
        env={**os.environ, "DIST_INFO": info_dir},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == digest


def documented_recipe() -> str:
    """The shell block docs/plugins.md gives under "Recompute a digest yourself"."""
    text = DOCS.read_text()
    section = text.split("### Recompute a digest yourself", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


# --- admission at boot -----------------------------------------------------------------------


def test_require_refuses_an_unpinned_plugin_and_admits_a_pinned_one(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin", "payload_plugin")
    configure(project, sandbox="require")
    digest = pin(project, site, "good_plugin")
    serve_once(project, before=(site,))
    admitted = project.events("plugin_admitted")
    assert [e["name"] for e in admitted] == ["good_plugin"]
    assert admitted[0] | {"ts": None} == {
        "ts": None,
        "event": "plugin_admitted",
        "name": "good_plugin",
        "dist": "good-plugin",
        "version": "1.0.0",
        "pin": digest,
        "families": {"spawn": ["office_hours"], "dirty": [], "observe": ["count_lines"]},
        "tier": "full",
    }
    refused = project.events("plugin_refused")
    assert [(e["name"], e["reason"]) for e in refused] == [
        ("payload_plugin", 'not pinned, and sandbox = "require" admits pinned plugins only')
    ]
    assert project.events("round_end")
    state = verdicts(project)
    assert state["good_plugin"]["state"] == "admitted"
    assert state["good_plugin"]["event_kinds"] == ["lines"]
    assert state["payload_plugin"]["state"] == "refused"
    rows = listed(project, site)
    assert rows["good_plugin"]["state"] == "admitted"
    assert rows["good_plugin"]["families"]["spawn"] == ["office_hours"]
    peek = cli(project, "peek").stdout
    assert "1 admitted (good_plugin), 1 refused (payload_plugin)" in peek


def test_a_sibling_module_edited_after_pinning_refuses_the_plugin(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin")
    configure(project)
    digest = pin(project, site, "good_plugin")
    helpers = site / "good_plugin" / "helpers.py"
    helpers.write_text('REASON = "edited after pinning"\n')
    serve_once(project, before=(site,))
    mismatch = project.events("plugin_checksum_mismatch")
    assert len(mismatch) == 1
    assert mismatch[0]["name"] == "good_plugin"
    assert mismatch[0]["expected"] == digest
    assert mismatch[0]["actual"] is None
    assert "good_plugin/helpers.py: does not match the hash in RECORD" in mismatch[0]["reason"]
    assert not project.events("plugin_admitted")
    assert project.events("round_end")
    assert listed(project, site)["good_plugin"]["pin_state"] == "mismatch"


def test_a_pinned_distribution_changed_consistently_is_a_mismatch_with_its_digest(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    """Files and RECORD rewritten together (an upgrade, or a careful attacker): the pin says no."""
    site = plugin_installs.site(project.root / "site", "good_plugin")
    configure(project)
    digest = pin(project, site, "good_plugin")
    record = next(site.glob("good_plugin-*.dist-info")) / "RECORD"
    record.write_text(
        "".join(
            line for line in record.read_text().splitlines(keepends=True) if "helpers" not in line
        )
    )
    serve_once(project, before=(site,))
    mismatch = project.events("plugin_checksum_mismatch")
    assert [(e["expected"], e["reason"]) for e in mismatch] == [
        (digest, "the distribution's files differ from the pin")
    ]
    assert DIGEST.fullmatch(mismatch[0]["actual"])
    assert mismatch[0]["actual"] != digest


def test_a_distribution_shipping_a_pth_file_is_refused(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "pth_plugin", "good_plugin")
    configure(project)
    serve_once(project, before=(site,))
    refused = project.events("plugin_refused")
    assert [e["name"] for e in refused] == ["pth_plugin"]
    assert "ships a .pth file (pth_plugin.pth)" in refused[0]["reason"]
    assert [e["name"] for e in project.events("plugin_admitted")] == ["good_plugin"]
    assert project.events("round_end")


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_squatter_is_evented_and_the_builtin_still_secures_the_tree(
    project: Project, markers: PluginInstalls, where: str
) -> None:
    site = markers.site(project.root / "site", "squatter_plugin")
    configure(project, command=["sh", "-c", "echo work > notes.txt"])
    placed = {"before": (site,)} if where == "before" else {"after": (site,)}
    serve_once(project, **placed)
    squats = {e["name"]: e for e in project.events("plugin_builtin_name_squat")}
    assert squats["builtin"]["dist"] == "squatter-plugin"
    assert squats["builtin"]["module"] == "squat_builtin"
    assert squats["borrowed"]["module"] == "agent_runner.plugins.builtin.dirty"
    refused = {e["name"]: e["reason"] for e in project.events("plugin_refused")}
    assert refused["borrowed"] == (
        "module agent_runner.plugins.builtin.dirty is not a file of squatter-plugin"
    )
    # The genuine builtin decided: the work is stashed, not ignored as the squatter would.
    stashed = project.events("orphan_stashed")
    assert len(stashed) == 1
    assert not project.events("dirty_ignored")
    message = git(project.work_dir, "log", "-1", "--format=%s", stashed[0]["ref"])
    assert "agent-runner round 1 (clean)" in message
    assert not markers.markers()


def test_a_squatter_is_refused_under_require_even_when_pinned(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "squatter_plugin")
    configure(project, sandbox="require", pin={"builtin": "sha256:" + "a" * 64})
    serve_once(project, before=(site,))
    refused = {e["name"]: e["reason"] for e in project.events("plugin_refused")}
    assert refused["builtin"] == 'claims a builtin\'s name or module, under sandbox = "require"'
    assert not project.events("plugin_admitted")
    assert project.events("round_end")


def test_manifest_name_and_third_party_imports_are_refused_at_describe(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "misnamed_plugin", "dependent_plugin")
    configure(project)
    serve_once(project, before=(site,))
    refused = {e["name"]: e["reason"] for e in project.events("plugin_refused")}
    assert refused == {
        "dependent_plugin": "imports tomli_w, which plugins cannot import (only the standard "
        "library, agent_runner.plugins and the plugin's own distribution)",
        "misnamed": "manifest name 'someone_else' differs from the entry-point name 'misnamed'",
    }
    assert project.events("round_end")


def test_a_disabled_plugin_is_never_read(project: Project, plugin_installs: PluginInstalls) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin")
    helpers = site / "good_plugin" / "helpers.py"
    helpers.unlink()
    os.mkfifo(helpers)  # reading it would block forever; hashing it would refuse the plugin
    configure(project, disable=["good_plugin"])
    serve_once(project, before=(site,))
    assert [e["name"] for e in project.events("plugin_disabled")] == ["good_plugin"]
    assert not project.events("plugin_refused")
    assert verdicts(project)["good_plugin"]["state"] == "disabled"


def test_a_pin_naming_no_installed_plugin_is_one_warning(project: Project) -> None:
    configure(project, pin={"gone_plugin": "sha256:" + "b" * 64})
    serve_once(project)
    assert [e["name"] for e in project.events("plugin_pin_unused")] == ["gone_plugin"]


def test_a_dirty_handler_that_is_not_admitted_is_a_boot_warning_and_the_builtin_acts(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin")
    command = ["sh", "-c", "echo round $AGENT_RUNNER_ROUND > notes.txt"]
    for name, reason in [
        ("nothing_here", "no installed plugin has this name"),
        ("good_plugin", "it has no dirty handler"),
    ]:
        project.write_config(command, vcs={"dirty_handler": name, "dirty_action": "commit"})
        serve_once(project, before=(site,))
        (warning,) = project.events("dirty_handler_unavailable")[-1:]
        assert (warning["name"], warning["reason"]) == (name, reason)
        kinds = [e["event"] for e in project.events()]
        assert kinds.index("dirty_handler_unavailable") < kinds.index("round_start")
    # Once per serve, and the builtin did what [vcs] dirty_action says: it committed.
    assert len(project.events("dirty_handler_unavailable")) == 2
    assert len(project.events("dirty_auto_committed")) == 2
    assert not project.events("dirty_intent_rejected")


def test_doctor_reports_each_plugins_provenance_pin_and_digest(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(
        project.root / "site", "good_plugin", "payload_plugin", "squatter_plugin"
    )
    configure(project, pin={"gone_plugin": "sha256:" + "c" * 64})
    digest = pin(project, site, "good_plugin")
    done = cli(project, "doctor", "--json", before=(site,))
    assert done.returncode == 1
    checks = [
        (c["name"], c["status"], c["detail"])
        for c in conforming("doctor --json", done.stdout)["checks"]
        if c["name"].startswith("plugin ")
    ]
    by_level = {(name, level) for name, level, _ in checks}
    assert by_level == {
        ("plugin builtin", "ok"),
        ("plugin good_plugin", "ok"),
        ("plugin payload_plugin", "warn"),
        ("plugin builtin", "fail"),
        ("plugin borrowed", "fail"),
        ("plugin gone_plugin", "warn"),
    }
    details = {name: detail for name, level, detail in checks if level != "fail"}
    assert details["plugin good_plugin"].endswith(f"pin verified; digest {digest}")
    assert "not pinned; digest sha256:" in details["plugin payload_plugin"]


def test_doctor_gives_a_paste_ready_pin_line_and_fails_on_a_mismatch(
    project: Project, plugin_installs: PluginInstalls
) -> None:
    site = plugin_installs.site(project.root / "site", "good_plugin", "squatter_plugin")
    stale = f'good_plugin = "sha256:{"d" * 64}"'
    configure(project, pin={"good_plugin": "sha256:" + "d" * 64})

    def doctor() -> dict[str, dict[str, str]]:
        done = cli(project, "doctor", "--json", before=(site,))
        checks = conforming("doctor --json", done.stdout)["checks"]
        return {f"{c['name']} {c['status']}": c for c in checks if c["name"].startswith("plugin ")}

    checks = doctor()
    mismatch = checks["plugin good_plugin fail"]
    assert "does not match its pin" in mismatch["detail"]
    line = mismatch["fix"].split("or add to [plugins.pin]: ", 1)[1]
    key, digest = line.split(" = ")
    assert key == "good_plugin"
    assert DIGEST.fullmatch(digest.strip('"'))
    # Never a pin line for a squatter: uninstalling it is the only fix.
    squatters = [c for k, c in checks.items() if k.endswith("fail") and "squatter" in c["detail"]]
    assert squatters
    assert all("[plugins.pin]" not in c["fix"] for c in squatters)
    # The line, pasted over the stale pin, is what the files hash to.
    assert stale in project.config_path.read_text()
    project.config_path.write_text(project.config_path.read_text().replace(stale, line))
    verified = doctor()["plugin good_plugin ok"]
    assert verified["detail"].endswith(f"pin verified; digest {digest.strip(chr(34))}")


# --- no plugin code in a supervisor-side process ---------------------------------------------


def test_an_import_time_payload_never_runs_in_a_supervisor_process(
    project: Project, markers: PluginInstalls
) -> None:
    site = markers.site(project.root / "site", "payload_plugin", "squatter_plugin")
    configure(project)
    # doctor fails here on purpose: the squatter is a FAIL line.
    expected = {"serve --once": 0, "round": 0, "peek": 0, "doctor": 1, "plugins list": 0}
    for command, code in expected.items():
        done = cli(project, *command.split(), before=(site,))
        assert done.returncode == code, (command, done.stderr)
    assert "not running" in cli(project, "status", before=(site,)).stdout
    subprocess.run(
        [sys.executable, "-c", "import agent_runner, agent_runner.plugins"],
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
    )
    # Both serve runs admitted it: its module really was imported, in a confined child.
    assert [e["name"] for e in project.events("plugin_admitted")].count("payload_plugin") == 2
    assert markers.markers() == []


def test_unconfined_the_payload_runs_only_in_a_sandbox_child(
    project: Project, markers: PluginInstalls
) -> None:
    """sandbox = "off": the payload may write its marker, but only from a call's own child."""
    site = markers.site(project.root / "site", "payload_plugin")
    configure(project, sandbox="off")
    serve = subprocess.Popen(
        cli_argv("serve", "--once", "--config", str(project.config_path), before=(site,)),
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert serve.wait(timeout=60) == 0
    found = markers.markers()
    # The describe call at boot and round 1's spawn hook: one fresh child each.
    assert len(found) == 2
    assert len({pid for pid, _ in found}) == 2
    # Not serve, and not the fork server (serve's child): children of the one fork server.
    assert len({parent for _, parent in found}) == 1
    for pid, parent in found:
        assert serve.pid not in (pid, parent)
    assert project.events("plugin_admitted")[0]["tier"] == "none"
