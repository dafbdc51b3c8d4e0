"""Hostile plugins, installed from real wheels, called by a real serve between real rounds.

Each one is denied, killed or contained with its event, and the loop goes on: every test
checks that the rounds still ran. Every test runs twice: serve as root, and serve as an
unused uid (`systemctl --user`). On a host that can confine these fail, never skip, when
plugins are admitted below the full tier.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_runner.supervisor.loop.state import read_state
from tests.conftest import PluginInstalls
from tests.integration.conftest import Project, git, pid_alive
from tests.launch_serve import PID_PLACEHOLDER
from tests.pluginrun import cli, fork_servers, hook_calls, listed, peek
from tests.security.conftest import SECRET_NAME, SECRET_VALUE, Served, expect_full_tier

QUIET_AGENT = ["sh", "-c", "exit 0"]


def configure(
    project: Project,
    command: list[str] | None = None,
    *,
    settings: dict[str, Any] | None = None,
    **plugins: Any,
) -> None:
    project.write_config(
        command or QUIET_AGENT,
        plugins={"sandbox": "prefer", **plugins, "settings": settings or {}},
    )


def failures(project: Project, hook: str | None = None) -> list[dict[str, Any]]:
    return [e for e in project.events("hook_failed") if hook is None or e["hook"] == hook]


# --- hangs, memory, floods, daemons -----------------------------------------------------------


def test_a_hanging_hook_times_out_and_is_quarantined_after_n_failures(
    served: Served, plugin_installs: PluginInstalls
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "stalling_plugin")
    configure(project, hook_timeout_s=1, quarantine_after=2)
    served.run(site, "--max-rounds", "3")
    expect_full_tier(project)
    timeouts = project.events("plugin_call_timeout")
    assert [(e["hook"], e["timeout_s"]) for e in timeouts] == [("stalling_plugin:stall", 1)] * 2
    assert [(e["plugin"], e["cause"]) for e in failures(project)] == [
        ("stalling_plugin", "timeout")
    ] * 2
    (quarantined,) = project.events("plugin_quarantined")
    assert quarantined["name"] == "stalling_plugin"
    assert (
        quarantined["reason"] == "2 failed calls in a row; the last: stalling_plugin:stall timeout"
    )
    # A failing hook counts as proceed, and after the quarantine it is not called at all.
    assert len(project.events("agent_spawn")) == 3
    kinds = [e["event"] for e in project.events()]
    assert (
        kinds.index("plugin_quarantined")
        < [i for i, k in enumerate(kinds) if k == "round_start"][1]
    )
    (row,) = [
        r for r in peek(project, site)["plugins"]["entries"] if r["name"] == "stalling_plugin"
    ]
    assert (row["state"], row["failures"]) == ("quarantined", 2)
    assert row["reason"] == quarantined["reason"]
    assert listed(project, site)["stalling_plugin"]["state"] == "quarantined"
    assert "1 quarantined (stalling_plugin)" in cli(project, "peek", before=(site,)).stdout


def test_a_fork_server_killed_mid_call_is_restarted_and_the_call_fails_cleanly(
    served: Served, plugin_installs: PluginInstalls
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "stalling_plugin")
    configure(project, hook_timeout_s=30, settings={"stalling_plugin": {"rounds": [1]}})
    serve = served.start(site, "--max-rounds", "2")
    project.wait_for("serve_start")
    deadline = time.monotonic() + 20
    servers = fork_servers(serve.pid)
    while not (servers and hook_calls(servers[0])):
        assert time.monotonic() < deadline, "no hook call started"
        time.sleep(0.02)
        servers = fork_servers(serve.pid)
    (server,) = servers
    os.kill(server, signal.SIGKILL)
    assert serve.wait(timeout=30) == 0
    expect_full_tier(project)
    (failed,) = failures(project)
    assert (failed["hook"], failed["cause"]) == ("stalling_plugin:stall", "crash")
    assert "fork server died" in failed["detail"]
    (restarted,) = project.events("sandbox_server_restarted")
    assert restarted["restarts"] == 1
    # Round 2's call ran in the new server and succeeded: no second failure.
    assert len(project.events("round_end")) == 2


def test_an_8_gib_allocation_is_oom_and_a_flood_stays_bounded(
    served: Served, plugin_installs: PluginInstalls
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "hog_plugin")
    configure(project, ["sleep", "1"])
    serve = served.start(site, "--max-rounds", "2")
    project.wait_for("agent_spawn", count=2)
    # The high-water mark of serve's memory, after one flood and one 8 GiB attempt at least.
    status = Path(f"/proc/{serve.pid}/status").read_text()
    peak_kib = int(
        next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]
    )
    assert serve.wait(timeout=30) == 0
    expect_full_tier(project)
    assert [(e["hook"], e["cause"]) for e in failures(project)] == [
        ("hog_plugin:allocate", "oom")
    ] * 2
    assert not project.events("hog_plugin.hoarded")
    # Two floods of 64 MiB on each stream went by; serve kept the last 8 KiB of each.
    assert peak_kib < 100 * 1024, f"serve peaked at {peak_kib} KiB"
    assert len(project.events("round_end")) == 2


@pytest.mark.parametrize("sandbox", ["prefer", "off"])
def test_a_daemon_a_hook_leaves_behind_does_not_survive_the_call(
    served: Served, markers: PluginInstalls, sandbox: str
) -> None:
    project = served.project
    site = markers.site(project.root / "site", "daemon_plugin")
    project.write_config(QUIET_AGENT, plugins={"sandbox": sandbox})
    served.run(site, "--once")
    (forked,) = project.events("daemon_plugin.forked")
    assert len(project.events("round_end")) == 1
    if sandbox == "prefer":
        expect_full_tier(project)
        # Confined, a hook cannot create a process at all.
        assert forked["error"] == "PermissionError: [Errno 1] Operation not permitted"
        assert not list(markers.marker_dir.glob("daemon-*"))
        return
    # Unconfined ("off"), it can: the call's end killed the daemon. serve does not sweep
    # the fork server's processes, and serve has exited: nobody else could have.
    pid = forked["pid"]
    assert (markers.marker_dir / f"daemon-{pid}").read_text() == str(pid)
    assert not pid_alive(pid)


# --- spawn decisions no loop may obey ---------------------------------------------------------

BAD_DEFERS = {
    "defer_half_second": "defer_s 0.5 not in 1..3600",
    "defer_past_max": "defer_s 3601 not in 1..3600",
    "defer_negative": "defer_s must be within 0..691200",
    "defer_nan": "defer_s must be within 0..691200",
    "defer_infinite": "defer_s must be within 0..691200",
    "defer_huge": "defer_s must be within 0..691200",
}


def test_out_of_range_and_non_finite_defers_are_invalid_results(
    served: Served, plugin_installs: PluginInstalls
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "spawn_plugin")
    configure(
        project,
        spawn_override_allow=["spawn_plugin"],
        max_defer_s=3600,
        quarantine_after=100,
        settings={"spawn_plugin": {"enabled": list(BAD_DEFERS)}},
    )
    served.run(site, "--once")
    expect_full_tier(project)
    failed = {e["hook"].split(":")[1]: e for e in failures(project)}
    assert set(failed) == set(BAD_DEFERS)
    for hook, detail in BAD_DEFERS.items():
        assert failed[hook]["cause"] == "invalid_result", hook
        assert detail in failed[hook]["detail"], (hook, failed[hook]["detail"])
    # Every bad defer counted as proceed: the round ran at once.
    assert not project.events("plugin_spawn_decision")
    assert not project.events("round_deferred")
    assert len(project.events("agent_spawn")) == 1


def test_a_hook_that_skips_forever_never_spins_the_loop(
    served: Served, plugin_installs: PluginInstalls
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "spawn_plugin")
    project.write_config(
        QUIET_AGENT,
        runtime={"restart_delay_s": 0},
        plugins={
            "sandbox": "prefer",
            "spawn_override_allow": ["spawn_plugin:always_skip"],
            "settings": {"spawn_plugin": {"enabled": ["always_skip"]}},
        },
    )
    started = time.monotonic()
    serve = served.start(site)
    project.wait_for("round_skipped", count=3)
    state = peek(project, site)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=10) == 0
    elapsed = time.monotonic() - started
    expect_full_tier(project)
    assert state["deferred"]["action"] == "skip"
    assert state["deferred"]["hook"] == "spawn_plugin:always_skip"
    skipped = project.events("round_skipped")
    assert {(e["round"], e["reason"]) for e in skipped} == {(1, "never today")}
    assert not project.events("agent_spawn")
    # restart_delay_s = 0, yet a second at least between two skips: never a hot loop.
    stamps = [event_time(e) for e in skipped]
    assert all(later - earlier >= 0.99 for earlier, later in itertools.pairwise(stamps))
    assert len(skipped) <= elapsed + 1
    decisions = project.events("plugin_spawn_decision")
    assert len(decisions) == len(skipped)
    assert {(d["hook"], d["action"]) for d in decisions} == {("spawn_plugin:always_skip", "skip")}


def event_time(event: dict[str, Any]) -> float:
    stamp = time.strptime(event["ts"][:19], "%Y-%m-%dT%H:%M:%S")
    return float(time.mktime(stamp) - time.timezone) + int(event["ts"][20:23]) / 1000


# --- dirty handlers that lie, fail, hang or write ---------------------------------------------

AGENT_WORK = ["sh", "-c", "echo round $AGENT_RUNNER_ROUND > notes.txt"]


@pytest.mark.parametrize(
    ("mode", "cause", "detail"),
    [
        ("outside", "invalid_result", "path not among the dirty files: ../outside.txt"),
        ("not_dirty", "invalid_result", "path not among the dirty files: never-touched.txt"),
        ("protected", "invalid_result", "path not among the dirty files: agent-runner.toml"),
        ("raise", "raised", "RuntimeError: the handler broke"),
        ("hang", "timeout", "no result within 1 s"),
        ("write", "raised", "PermissionError: [Errno 13] Permission denied"),
    ],
)
def test_a_dirty_handler_that_fails_or_lies_costs_nothing_the_builtin_stashes(
    served: Served, plugin_installs: PluginInstalls, mode: str, cause: str, detail: str
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "dirty_plugin")
    project.write_config(
        AGENT_WORK,
        vcs={"dirty_handler": "dirty_plugin", "dirty_action": "ignore"},
        plugins={
            "sandbox": "prefer",
            "hook_timeout_s": 1,
            "settings": {"dirty_plugin": {"mode": mode}},
        },
    )
    served.run(site, "--once")
    expect_full_tier(project)
    (failed,) = failures(project)
    assert (failed["hook"], failed["cause"]) == ("dirty_plugin:decide", cause)
    assert detail in failed["detail"]
    (rejected,) = project.events("dirty_intent_rejected")
    assert rejected["reason"].endswith("stashed instead")
    # Not ignored as dirty_action says, not committed as the handler said: stashed by SHA.
    (stashed,) = project.events("orphan_stashed")
    assert git(project.work_dir, "show", f"{stashed['ref']}:notes.txt") == "round 1\n"
    assert git(project.work_dir, "status", "--porcelain") == ""
    assert not project.events("dirty_auto_committed")
    assert not (project.work_dir / "planted.txt").exists()
    assert not (project.root / "outside.txt").exists()


def test_a_dirty_handler_may_read_the_work_tree(
    served: Served, plugin_installs: PluginInstalls
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "dirty_plugin")
    project.write_config(
        AGENT_WORK,
        vcs={"dirty_handler": "dirty_plugin"},
        plugins={"sandbox": "prefer", "settings": {"dirty_plugin": {"mode": "read"}}},
    )
    served.run(site, "--once")
    expect_full_tier(project)
    assert not failures(project)
    (stashed,) = project.events("orphan_stashed")
    message = git(project.work_dir, "log", "-1", "--format=%s", stashed["ref"])
    assert message.strip().endswith("read: round 1")


# --- reaching for what a plugin must never get ------------------------------------------------


@pytest.fixture
def listeners() -> Iterator[tuple[socket.socket, socket.socket, Path]]:
    """A TCP listener on loopback and a unix-socket listener any uid could connect to."""
    folder = Path(tempfile.mkdtemp(prefix="agent-runner-sockets-"))
    folder.chmod(0o755)
    tcp = socket.create_server(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(folder / "socket"))
    (folder / "socket").chmod(0o777)
    unix.listen()
    for sock in (tcp, unix):
        sock.setblocking(False)
    try:
        yield tcp, unix, folder
    finally:
        tcp.close()
        unix.close()
        shutil.rmtree(folder)


def test_hostile_hooks_are_denied_or_killed_and_the_rounds_go_on(
    served: Served,
    plugin_installs: PluginInstalls,
    listeners: tuple[socket.socket, socket.socket, Path],
) -> None:
    project = served.project
    tcp, unix, folder = listeners
    child_uid = served.child_uid
    # Readable and writable by the plugin's uid: only the sandbox stands in the way.
    secret = folder / "secret.txt"
    secret.write_text(f"{SECRET_VALUE}\n")
    secret.chmod(0o600)
    outside = folder / "outside"
    outside.mkdir(mode=0o755)
    for path in (secret, outside):
        os.chown(path, child_uid, child_uid)
    site = plugin_installs.site(project.root / "site", "prober_plugin")
    project.write_config(
        QUIET_AGENT,
        plugins={
            "sandbox": "prefer",
            "quarantine_after": 100,
            "spawn_override_allow": ["prober_plugin"],
            "settings": {
                "prober_plugin": {
                    "serve_pid": PID_PLACEHOLDER,  # serve's own, filled in by tests.launch_serve
                    "tcp_port": tcp.getsockname()[1],
                    "unix_socket": str(folder / "socket"),
                    "secret_file": str(secret),
                    "outside_dir": str(outside),
                    # Readable by any uid; only a dirty handler's call gets the work tree.
                    "work_file": str(project.work_dir / ".gitignore"),
                }
            },
        },
    )
    serve = served.start(site, "--max-rounds", "2", env={SECRET_NAME: SECRET_VALUE})
    project.wait_for("agent_spawn")
    tracer = next(
        line
        for line in Path(f"/proc/{serve.pid}/status").read_text().splitlines()
        if line.startswith("TracerPid")
    )
    assert serve.wait(timeout=60) == 0
    expect_full_tier(project)
    assert tracer.split() == ["TracerPid:", "0"]

    # ptrace is an escape syscall: the seccomp filter kills the child, every time.
    kills = project.events("plugin_sandbox_kill")
    assert [(e["hook"], e["signal"], e["syscall"]) for e in kills] == [
        ("prober_plugin:ptrace_serve", "SIGSYS", None)
    ] * 2
    causes: dict[str, set[str]] = {}
    details: dict[str, set[str]] = {}
    for event in failures(project):
        causes.setdefault(event["hook"].split(":")[1], set()).add(event["cause"])
        details.setdefault(event["hook"].split(":")[1], set()).add(event["detail"])
    assert causes == {
        "ptrace_serve": {"sandbox_kill"},
        "probe_tcp": {"raised"},
        "probe_unix_socket": {"raised"},
        "probe_serve_environ": {"raised"},
        "probe_secret_file": {"raised"},
        "probe_work_tree": {"raised"},
        "probe_write_outside": {"raised"},
    }
    # Sockets of every family fail with EPERM (seccomp); paths with EACCES (Landlock).
    assert details["probe_tcp"] == {"PermissionError: [Errno 1] Operation not permitted"}
    assert details["probe_unix_socket"] == {"PermissionError: [Errno 1] Operation not permitted"}
    for hook in (
        "probe_serve_environ",
        "probe_secret_file",
        "probe_work_tree",
        "probe_write_outside",
    ):
        assert all(
            d.startswith("PermissionError: [Errno 13] Permission denied") for d in details[hook]
        )
    assert not project.events("prober_plugin.reached")
    with pytest.raises(BlockingIOError):
        tcp.accept()
    with pytest.raises(BlockingIOError):
        unix.accept()
    assert list(outside.iterdir()) == []
    # The plugin's own environment: the allow-list, nothing of serve's.
    (environ, _) = project.events("prober_plugin.environ")
    names = set(environ["variables"])
    assert names <= {"PATH", "LANG", "TZ", "HOME", "TMPDIR"} | {
        n for n in names if n.startswith("LC_")
    }
    assert SECRET_NAME not in names
    log = b"".join(path.read_bytes() for path in project.log_dir.glob("events-*.jsonl"))
    assert SECRET_VALUE.encode() not in log
    # Serve went on: both rounds ran, every failing hook counted as proceed.
    assert len(project.events("round_end")) == 2
    assert len(project.events("agent_spawn")) == 2
    assert read_state(project.log_dir)["last_round"]["exit_cause"] == "clean"
