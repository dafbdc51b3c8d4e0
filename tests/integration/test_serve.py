"""The loop end to end: real CLI, real agents, real signals, real git."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Project, agent, git, pid_alive

LIFECYCLE = ["round_start", "agent_spawn", "agent_exit", "round_end"]


def round_kinds(project: Project) -> list[str]:
    return [e["event"] for e in project.events() if e["event"] in LIFECYCLE]


def test_max_rounds_runs_each_round_fully_and_exits_0(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 3})
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    assert round_kinds(project) == LIFECYCLE * 3
    assert [e["round"] for e in project.events("round_end")] == [1, 2, 3]
    assert project.events("max_rounds_reached")[0]["rounds"] == 3
    assert project.events("serve_stop")[0]["reason"] == "max_rounds"


def test_once_runs_one_round_and_a_failing_agent_is_an_error_cause(project: Project) -> None:
    project.write_config(agent("exits_with.py", "3"))
    done = project.cli("serve", "--once")
    assert done.returncode == 0, done.stderr
    exit_event = project.events("agent_exit")[0]
    assert (exit_event["exit_code"], exit_event["exit_cause"], exit_event["signal"]) == (
        3,
        "error",
        None,
    )


def test_round_command_runs_exactly_one_round(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    assert project.cli("round").returncode == 0
    assert len(project.events("round_start")) == 1


def test_crash_loop_gives_up_with_69_and_delays_double(project: Project) -> None:
    project.write_config(
        agent("exits_with.py", "1"),
        runtime={"restart_delay_s": 0.1, "max_restart_delay_s": 5},
        breakers={"crash_loop_rounds": 4},
    )
    done = project.cli("serve")
    assert done.returncode == 69, done.stderr
    crash = project.events("crash_loop")
    assert len(crash) == 1
    assert crash[0]["count"] == 4
    starts = [e for e in project.events() if e["event"] in ("round_start", "agent_exit")]
    gaps = [
        _seconds(starts[i + 1]["ts"]) - _seconds(starts[i]["ts"])
        for i in range(1, len(starts) - 1, 2)
    ]
    # Delays after 1, 2, 3 failures: 0.2, 0.4, 0.8 s (doubling from 0.1 s).
    assert len(gaps) == 3
    assert gaps[0] >= 0.19 and gaps[1] >= 0.39 and gaps[2] >= 0.79
    assert gaps[0] < gaps[1] < gaps[2]


def test_stalled_breaker_gives_up_when_clean_rounds_change_nothing(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), breakers={"stalled_rounds": 3})
    done = project.cli("serve")
    assert done.returncode == 69
    assert project.events("stalled_no_progress")[0]["count"] == 3
    assert len(project.events("round_start")) == 3


def test_auth_breaker_gives_up_with_69(project: Project) -> None:
    project.write_config(agent("auth_failed.py"), breakers={"auth_failed_rounds": 2})
    done = project.cli("serve")
    assert done.returncode == 69
    assert len(project.events("agent_auth_error_detected")) == 2
    assert project.events("auth_failed")[0]["count"] == 2
    assert project.events("crash_loop") == []


def test_backoff_waits_for_the_server_reset_then_recovers(project: Project) -> None:
    project.write_config(agent("rate_limited.py", "1.5", "1"), runtime={"max_rounds": 2})
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    transient = project.events("transient_error_detected")[0]
    assert transient["classification"] == "rate_limit_account"
    wait = project.events("backoff_wait")[0]
    assert wait["source"] == "server"
    assert wait["until"] >= transient["reset_at"]
    second_start = project.events("round_start")[1]
    assert _seconds(second_start["ts"]) >= transient["reset_at"] - 0.01
    assert project.events("backoff_recovered")[0]["classification"] == "rate_limit_account"
    assert project.events("crash_loop") == []


def test_sigterm_during_backoff_stops_at_once_and_backoff_survives_restart(
    project: Project,
) -> None:
    # How soon is benchmarks/bench_serve.py's stop latency; here: not after the hour's wait.
    project.write_config(agent("rate_limited.py", "3600"))
    serve = project.start()
    wait = project.wait_for("backoff_wait")
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=60) == 0
    assert project.events("serve_stop")[0]["reason"] == "stopped (SIGTERM)"

    again = project.start()
    resumed = project.wait_for("backoff_wait", count=2)
    assert resumed["until"] == wait["until"]
    time.sleep(0.3)
    assert len(project.events("round_start")) == 1, (
        "a restarted serve must not spawn during back-off"
    )
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=5) == 0


def test_second_serve_exits_73_naming_the_holder(project: Project) -> None:
    project.write_config(agent("sleeper.py", "30"))
    first = project.start()
    project.wait_for("agent_spawn")
    second = project.cli("serve")
    assert second.returncode == 73
    assert f"pid {first.pid}" in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=10) == 0


def test_sigkill_mid_round_then_restart_reaps_the_old_group_before_spawning(
    project: Project, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    project.write_config(agent("records_pid.py", str(pids), "60"))
    first = project.start()
    project.wait_for("agent_spawn")
    deadline = time.monotonic() + 10
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    first.kill()
    first.wait()
    old_agent = int(pids.read_text().split()[0])
    assert pid_alive(old_agent), "the agent outlives a SIGKILLed serve until the next start"

    second = project.start()
    spawn = project.wait_for("agent_spawn", count=2)
    orphan = project.events("round_orphan_reaped")
    assert orphan and old_agent in orphan[0]["pids"]
    kinds = [e["event"] for e in project.events()]
    assert kinds.index("round_orphan_reaped") < len(kinds) - 1 - kinds[::-1].index("agent_spawn")
    assert not pid_alive(old_agent)
    assert spawn["pid"] != old_agent
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=10) == 0


def test_stop_file_stops_the_round_and_serve(project: Project) -> None:
    project.write_config(agent("sleeper.py", "60"))
    serve = project.start()
    project.wait_for("agent_spawn")
    (project.log_dir / "STOP").write_text("")
    assert serve.wait(timeout=10) == 0
    assert project.events("stop_file_detected")
    assert project.events("stop_requested")[0] == {
        **project.events("stop_requested")[0],
        "source": "stop_file",
        "mode": "terminate",
    }
    assert project.events("agent_exit")[0]["exit_cause"] == "stopped"


def test_stop_command_terminates_the_round(project: Project) -> None:
    project.write_config(agent("sleeper.py", "60"))
    serve = project.start()
    project.wait_for("agent_spawn")
    status = json.loads(project.cli("status", "--json").stdout)
    assert (status["supervisor"]["state"], status["supervisor"]["pid"]) == ("running", serve.pid)
    assert status["round"]["n"] == 1
    stopped = project.cli("stop", "--timeout", "10")
    assert stopped.returncode == 0, stopped.stderr
    assert serve.wait(timeout=1) == 0
    assert project.events("agent_exit")[0]["exit_cause"] == "stopped"
    # Its own source, not systemd's SIGTERM: the operator asked.
    assert project.events("stop_requested")[0]["source"] == "stop"
    assert project.events("serve_stop")[0]["reason"] == "stopped (stop)"
    assert not (project.log_dir / "stop-request").exists()
    after = project.cli("status", "--json")
    assert after.returncode == 3
    assert json.loads(after.stdout)["supervisor"]["state"] == "stopped"


def test_stop_after_round_lets_the_round_finish(project: Project) -> None:
    release = project.root / "release"
    project.write_config(agent("waits_for_file.py", str(release)))
    serve = project.start()
    project.wait_for("agent_spawn")
    stopped = project.cli("stop", "--after-round", "--timeout", "10")
    # Accepted is success: the round goes on, and both stop and status say a stop is pending.
    assert stopped.returncode == 0, stopped.stderr
    assert (
        stopped.stdout.strip() == f"serve (pid {serve.pid}) stops when round 1 ends (stop pending)"
    )
    status = json.loads(project.cli("status", "--json").stdout)
    pending = {"mode": "finish_round", "source": "stop --after-round"}
    assert status["supervisor"]["pending_stop"] == pending
    assert "stop pending (finish_round, from stop --after-round)" in project.cli("status").stdout
    assert serve.poll() is None
    release.touch()
    assert serve.wait(timeout=30) == 0
    assert project.events("agent_exit")[0]["exit_cause"] == "clean"
    assert len(project.events("round_start")) == 1


def test_stop_after_round_that_is_never_acknowledged_is_an_error(project: Project) -> None:
    project.write_config(agent("sleeper.py", "60"))
    serve = project.start()
    project.wait_for("agent_spawn")
    serve.send_signal(signal.SIGSTOP)  # alive, holding the lock, but taking no requests
    try:
        refused = project.cli("stop", "--after-round", "--timeout", "0.5")
    finally:
        serve.send_signal(signal.SIGCONT)
    assert refused.returncode == 1
    assert f"serve (pid {serve.pid}) still running after 0.5s" in refused.stderr
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=10) == 0


def test_stop_without_a_running_serve_says_so_and_succeeds(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    done = project.cli("stop")
    assert done.returncode == 0
    assert done.stdout == f"no serve is running for {project.work_dir}\n"


def test_budget_timeout_kills_an_agent_that_ignores_sigterm(project: Project) -> None:
    project.write_config(
        agent("ignores_sigterm.py"), runtime={"round_budget_s": 1, "max_rounds": 1}
    )
    started = time.monotonic()
    assert project.cli("serve").returncode == 0
    assert time.monotonic() - started >= 1.5  # budget + grace
    assert project.events("round_timeout_kill")[0]["budget_s"] == 1
    exit_event = project.events("agent_exit")[0]
    assert (exit_event["exit_cause"], exit_event["signal"]) == ("timeout", "SIGKILL")


def test_live_edits_apply_next_round_and_a_broken_config_keeps_serving(
    project: Project, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    project.write_config(agent("live_editor.py", str(record)), runtime={"max_rounds": 4})
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    assert record.read_text().splitlines() == [
        "1:do the work",
        "2:second prompt",
        "3:second prompt",
        "4:second prompt",
    ]
    assert project.events("config_reloaded")[0]["changed"] == ["runtime.round_budget_s"]
    failed = project.events("config_reload_failed")
    assert len(failed) == 1, "one event per distinct error, not one per round"
    assert "not valid TOML" in failed[0]["reason"]


def test_restart_only_changes_are_deferred(project: Project) -> None:
    from agent_runner.config import load_config
    from agent_runner.supervisor.loop.reload import ConfigWatcher
    from tests.fakes import RecordedEvents

    project.write_config(agent("exits_with.py", "0"))
    events = RecordedEvents()
    watcher = ConfigWatcher(load_config(project.config_path), events)
    project.write_config(
        agent("exits_with.py", "0"), plugins={"sandbox": "off"}, runtime={"restart_delay_s": 2}
    )
    running = watcher.refresh()
    assert running.plugins.sandbox == "prefer"
    assert running.runtime.restart_delay_s == 2
    assert events.of("config_reloaded")[0]["changed"] == ["runtime.restart_delay_s"]
    assert events.of("config_reload_deferred")[0]["changed"] == ["plugins.sandbox"]


class NotifyListener:
    """A stand-in for systemd: a datagram socket read continuously, as systemd reads it."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self.arrived: list[float] = []  # monotonic time each message was read
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._done.is_set():
            try:
                message = self.sock.recv(4096).decode()
                self.arrived.append(time.monotonic())
                self.messages.append(message)
            except TimeoutError:
                continue

    def close(self) -> list[str]:
        time.sleep(0.2)  # let the last datagrams land
        self._done.set()
        self._thread.join()
        self.sock.close()
        return self.messages


def test_sd_notify_messages_arrive_in_order_with_watchdog_pings_at_half_of_watchdog_usec(
    project: Project, tmp_path: Path
) -> None:
    listener = NotifyListener(tmp_path / "notify.sock")
    project.write_config(agent("exits_with.py", "0", "11"), runtime={"max_rounds": 1})
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "4000000"}
    done = project.cli("serve", env=env)
    messages = listener.close()
    assert done.returncode == 0, done.stderr
    assert messages[0].startswith("READY=1")
    assert any(m.startswith("STATUS=round 1 running") for m in messages)
    assert messages[-1] == "STOPPING=1"
    pings = [t for t, m in zip(listener.arrived, messages, strict=True) if m == "WATCHDOG=1"]
    gaps = [later - earlier for earlier, later in itertools.pairwise(pings)]
    assert len(gaps) >= 4, messages  # during the round too
    assert 1.6 <= statistics.median(gaps) <= 2.5, gaps  # half of 4 s
    # The rule systemd enforces: a gap of WATCHDOG_USEC is a watchdog kill.
    assert max(gaps) < 4.0, gaps


def test_sd_notify_extends_the_stop_timeout_while_a_round_drains(
    project: Project, tmp_path: Path
) -> None:
    listener = NotifyListener(tmp_path / "notify.sock")
    project.write_config(agent("exits_with.py", "0", "2.5"))
    serve = project.start(env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    project.wait_for("agent_spawn")
    assert project.cli("stop", "--after-round", "--timeout", "10").returncode == 0
    assert serve.wait(timeout=5) == 0
    messages = listener.close()
    assert "EXTEND_TIMEOUT_USEC=15000000" in messages
    # systemd hears of the stop as soon as it is asked for, before the round drains.
    assert messages.index("STOPPING=1") < messages.index("EXTEND_TIMEOUT_USEC=15000000")


def test_sd_notify_abstract_socket(project: Project) -> None:
    name = f"agent-runner-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(10)
        project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
        assert project.cli("serve", env={"NOTIFY_SOCKET": "@" + name}).returncode == 0
        assert sock.recv(4096).decode().startswith("READY=1")


def blocked_writing_stderr(pid: int) -> bool:
    """The process's main thread sits in write(2, ...): /proc/PID/syscall names the call."""
    write_nr = {"x86_64": 1, "aarch64": 64}.get(os.uname().machine)
    if write_nr is None:
        pytest.fail(f"write(2)'s syscall number on {os.uname().machine} is not known here")
    fields = Path(f"/proc/{pid}/syscall").read_text().split()
    return fields[:2] == [str(write_nr), "0x2"]


def test_a_wedged_loop_stops_pinging_the_watchdog_until_it_moves_again(
    project: Project, tmp_path: Path
) -> None:
    # serve's console is its stderr: under systemd, a stream to the journal. A journal that
    # stops reading blocks serve's next console write, and the loop is wedged for real.
    listener = NotifyListener(tmp_path / "notify.sock")
    project.write_config(agent("exits_with.py", "0", "0.2"), breakers={"stalled_rounds": 10_000})
    console, serve_stderr = os.pipe()
    fcntl.fcntl(serve_stderr, fcntl.F_SETPIPE_SZ, 8192)
    capacity = fcntl.fcntl(serve_stderr, fcntl.F_GETPIPE_SZ)
    serve = subprocess.Popen(
        [sys.executable, "-m", "agent_runner", "serve", "--config", str(project.config_path)],
        env={
            **os.environ,
            "NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
            "WATCHDOG_USEC": "1000000",
        },
        stdout=subprocess.DEVNULL,
        stderr=serve_stderr,
    )
    project.children.append(serve)
    os.close(serve_stderr)
    deadline = time.monotonic() + 60
    # A console line is written whole (under PIPE_BUF), so the pipe blocks before it is full.
    while not (unread_bytes(console) > capacity - 4096 and blocked_writing_stderr(serve.pid)):
        assert serve.poll() is None and time.monotonic() < deadline, "serve never wedged"
        time.sleep(0.05)
    time.sleep(0.3)  # a ping sent just before the write blocked has landed by now
    pings = listener.messages.count("WATCHDOG=1")
    assert pings >= 1  # it was pinging while it moved
    time.sleep(2.5)  # five watchdog intervals
    assert listener.messages.count("WATCHDOG=1") == pings
    assert blocked_writing_stderr(serve.pid)

    drained = threading.Thread(target=lambda: drain(console), daemon=True)
    drained.start()
    deadline = time.monotonic() + 20
    while listener.messages.count("WATCHDOG=1") == pings:
        assert time.monotonic() < deadline, "pings did not resume after the console drained"
        time.sleep(0.05)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=30) == 0
    drained.join(timeout=10)
    assert "STOPPING=1" in listener.close()


def unread_bytes(fd: int) -> int:
    buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    return int.from_bytes(buf, sys.byteorder)


def drain(fd: int) -> None:
    with os.fdopen(fd, "rb", buffering=0) as reader:
        while reader.read(65536):
            pass


def test_config_error_exits_78_with_one_line(project: Project) -> None:
    project.config_path.write_text("schema_version = 1\n[plugins]\nsandox = 'off'\n")
    for command in (["serve"], ["round"], ["peek"], ["status"], ["doctor"], ["events"], ["stop"]):
        done = project.cli(*command)
        if command == ["doctor"]:
            assert done.returncode == 78
            assert "sandox" in done.stdout
            continue
        assert done.returncode == 78, command
        assert done.stderr.count("\n") == 1, done.stderr
        assert "plugins.sandox: unknown key (did you mean 'sandbox'?)" in done.stderr
        assert "Traceback" not in done.stderr


def test_demo_runs_three_rounds_with_a_rate_limit(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent_runner", "demo"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for kind in ("transient_error_detected", "backoff_wait", "backoff_recovered", "orphan_stashed"):
        assert kind in out
    assert out.count(" round_end ") == 3
    assert "agent-runner peek" in out


def _seconds(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("delivery", ["stdin", "argv"])
def test_prompt_and_environment_reach_the_agent(
    project: Project, tmp_path: Path, delivery: str
) -> None:
    out = tmp_path / "echo"
    out.mkdir()
    project.write_config(
        agent("echo_prompt.py"),
        agent={
            "prompt_delivery": delivery,
            "env": {
                "ECHO_OUT": str(out),
                "ECHO_VARS": "AGENT_RUNNER_ROUND,AGENT_RUNNER_TRANSCRIPT,ECHO_OUT",
            },
        },
    )
    assert project.cli("round").returncode == 0
    if delivery == "stdin":
        assert (out / "stdin.bin").read_bytes() == b"do the work\n"
    else:
        assert json.loads((out / "argv.json").read_text())[-1] == "do the work\n"
    env = json.loads((out / "env.json").read_text())
    assert env["AGENT_RUNNER_ROUND"] == "1"
    assert env["AGENT_RUNNER_TRANSCRIPT"].endswith("rounds/round-000001.log")
    transcript = Path(env["AGENT_RUNNER_TRANSCRIPT"]).read_text()
    assert "echoed to stdout" in transcript and "echoed to stderr" in transcript


@pytest.mark.parametrize("ending", ["exit", "sleep"])
def test_escaped_descendants_are_reaped_after_every_round(
    project: Project, tmp_path: Path, ending: str
) -> None:
    pids_file = tmp_path / "pids"
    project.write_config(
        agent("spawns_orphan.py", str(pids_file), ending),
        runtime={"max_rounds": 1, "round_budget_s": 2},
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    grandchild, daemon = map(int, pids_file.read_text().split())
    reaped = project.events("round_leftovers_reaped")
    assert reaped, "the escaped processes must be named"
    assert {grandchild, daemon} <= set(reaped[0]["pids"])
    assert not pid_alive(grandchild)
    assert not pid_alive(daemon)
    cause = project.events("agent_exit")[0]["exit_cause"]
    assert cause == ("clean" if ending == "exit" else "timeout")


@pytest.mark.parametrize(
    "damage", ["not json at all", '{"loop": {"backoff_until": "soon", "failures": -3}}', "[]"]
)
def test_a_damaged_state_file_costs_the_counters_not_the_supervisor(
    project: Project, damage: str
) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    project.log_dir.mkdir()
    (project.log_dir / "state.json").write_text(damage)
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    assert len(project.events("round_end")) == 1


def test_unusable_log_dir_is_one_line_and_exit_78(project: Project) -> None:
    project.log_dir.write_text("a file where the log_dir should be")
    project.write_config(agent("exits_with.py", "0"))
    done = project.cli("serve")
    assert done.returncode == 78
    assert done.stderr == (
        f"agent-runner: {project.config_path}: runtime.log_dir: {project.log_dir} is not a "
        "directory\n"
    )


def test_missing_agent_binary_at_boot_is_a_config_error(project: Project) -> None:
    project.write_config(["no-such-agent-xyz", "-p"])
    done = project.cli("serve")
    assert done.returncode == 78
    assert "agent.command: 'no-such-agent-xyz' is not an executable on PATH" in done.stderr


def test_an_agent_binary_that_vanishes_mid_run_ends_in_a_crash_loop(
    project: Project, tmp_path: Path
) -> None:
    script = tmp_path / "agent.sh"
    script.write_text('#!/bin/sh\nrm -f "$0"\nexit 0\n')
    script.chmod(0o755)
    project.write_config([str(script)], breakers={"crash_loop_rounds": 2})
    done = project.cli("serve")
    assert done.returncode == 69, done.stderr
    failed = project.events("agent_spawn_failed")
    print(
        [
            (e["event"], e.get("round"), e.get("reason"), e.get("exit_cause"))
            for e in project.events()
        ]
    )
    assert [e["round"] for e in failed] == [2, 3]
    assert project.events("crash_loop")[0]["count"] == 2


def test_a_deleted_prompt_file_pauses_serve_until_it_is_back(project: Project) -> None:
    prompt = project.work_dir / "prompts" / "main.md"
    project.write_config(
        agent("exits_with.py", "0"), runtime={"max_rounds": 2, "restart_delay_s": 0.5}
    )
    serve = project.start()
    project.wait_for("round_end")
    prompt.unlink()
    failed = project.wait_for("config_reload_failed")
    assert "prompt.files[0]" in failed["reason"]
    time.sleep(2.5)
    assert len(project.events("config_reload_failed")) == 1, "reported once, not every retry"
    assert serve.poll() is None, "serve keeps running"
    prompt.write_text("back again\n")
    assert serve.wait(timeout=10) == 0
    assert len(project.events("round_end")) == 2


def test_live_prompt_edits_and_the_config_are_never_stashed(project: Project) -> None:
    (project.work_dir / ".gitignore").write_text("")  # the prompt and config are tracked files
    git(project.work_dir, "add", "-A")
    git(project.work_dir, "commit", "-q", "-m", "track the prompt")
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    git(project.work_dir, "add", "-A")
    git(project.work_dir, "commit", "-q", "-m", "track the config")
    (project.work_dir / "prompts" / "main.md").write_text("an edit in progress\n")
    (project.work_dir / "scratch.txt").write_text("agent work\n")
    assert project.cli("serve").returncode == 0
    assert project.events("orphan_stashed")
    assert (project.work_dir / "prompts" / "main.md").read_text() == "an edit in progress\n"
    assert not (project.work_dir / "scratch.txt").exists()
    stashed = git(project.work_dir, "stash", "show", "--include-untracked", "--name-only")
    assert "scratch.txt" in stashed
    assert "prompts/main.md" not in stashed


def test_serve_refuses_a_log_dir_inside_the_tree_that_git_does_not_ignore(
    project: Project,
) -> None:
    project.write_config(
        agent("exits_with.py", "0"), runtime={"log_dir": str(project.work_dir / "logs")}
    )
    done = project.cli("serve")
    assert done.returncode == 78
    assert "git does not ignore it" in done.stderr
    from agent_runner.events import iter_events

    assert [e["event"] for e in iter_events(project.work_dir / "logs")] == ["config_broken"]


def test_a_reload_with_an_unknown_parser_is_refused_and_serve_keeps_going(
    project: Project, tmp_path: Path
) -> None:
    script = tmp_path / "edit.sh"
    script.write_text(
        f'#!/bin/sh\nsed -i \'s/parser = "claude"/parser = "claudee"/\' {project.config_path}\n'
    )
    script.chmod(0o755)
    project.write_config([str(script)], runtime={"max_rounds": 3})
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    failed = project.events("config_reload_failed")
    assert len(failed) == 1
    assert "unknown parser 'claudee'" in failed[0]["reason"]
    assert len(project.events("round_end")) == 3


def test_the_agent_never_inherits_the_notify_socket(project: Project, tmp_path: Path) -> None:
    out = tmp_path / "echo"
    out.mkdir()
    project.write_config(
        agent("echo_prompt.py"),
        agent={"env": {"ECHO_OUT": str(out), "ECHO_VARS": "NOTIFY_SOCKET,WATCHDOG_USEC,HOME"}},
    )
    env = {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens"), "WATCHDOG_USEC": "1000000"}
    assert project.cli("round", env=env).returncode == 0
    seen = json.loads((out / "env.json").read_text())
    assert seen["NOTIFY_SOCKET"] is None
    assert seen["WATCHDOG_USEC"] is None
    assert seen["HOME"] == os.environ["HOME"]


def test_breaker_counters_start_afresh_after_a_deliberate_restart(project: Project) -> None:
    project.write_config(agent("exits_with.py", "1"), breakers={"crash_loop_rounds": 3})
    assert project.cli("serve").returncode == 69
    assert project.cli("serve").returncode == 69
    counts = [e["count"] for e in project.events("crash_loop")]
    assert counts == [3, 3]
    assert len(project.events("round_start")) == 6


def test_a_far_future_backoff_in_state_is_capped_at_max_wait(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), backoff={"max_wait_s": 60})
    project.log_dir.mkdir()
    loop = {
        "backoff_until": 1e18,
        "backoff_class": "rate_limit_account",
        "backoff_source": "server",
    }
    (project.log_dir / "state.json").write_text(json.dumps({"loop": loop}))
    serve = project.start()
    wait = project.wait_for("backoff_wait")
    assert wait["wait_s"] <= 60
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=5) == 0
