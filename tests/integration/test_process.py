"""Real agents in their own sessions: exit, budget, stop, prompt delivery, nothing left behind."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent_runner.supervisor.agent import strays
from agent_runner.supervisor.agent.process import (
    AgentProcess,
    SpawnError,
    agent_environment,
    deliver_prompt,
    transcript_path,
)
from agent_runner.supervisor.agent.strays import (
    Orphans,
    become_subreaper,
    kill_orphans,
    process_start_ticks,
    reap_leftovers,
)

AGENTS = Path(__file__).parent.parent / "agents"
REPO = Path(__file__).parent.parent.parent


def agent(name: str, *args: str) -> list[str]:
    return [sys.executable, "-I", str(AGENTS / name), *args]


def own_children() -> set[int]:
    kids: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        kids.update(int(p) for p in Path(f"/proc/self/task/{tid}/children").read_text().split())
    return kids


def gone(pid: int) -> bool:
    """Neither running nor a zombie: the kernel has forgotten the process."""
    return not Path(f"/proc/{pid}").exists()


def group_members(pgid: int) -> list[int]:
    return [e.pid for e in strays._scan_proc() if e.pgrp == pgid]


def wait_for_file(path: Path, timeout_s: float = 5.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)
    return path.read_text()


@pytest.fixture(autouse=True)
def preexisting() -> Iterator[set[int]]:
    """Make the test process a subreaper; afterwards, nothing a test started may survive it."""
    become_subreaper()
    before = own_children()
    yield before
    assert reap_leftovers(keep=before) == [], "a test left processes behind"


def spawn(tmp_path: Path, argv: list[str], stdin_data: bytes | None = None) -> AgentProcess:
    return AgentProcess.spawn(
        argv,
        cwd=tmp_path,
        env=os.environ,
        stdin_data=stdin_data,
        transcript=transcript_path(tmp_path / "logs", 1),
    )


def test_clean_exit_is_reported_as_clean(tmp_path: Path) -> None:
    agent_ = spawn(tmp_path, agent("exits_with.py", "0"))
    assert agent_.wait(5)
    result = agent_.result()
    assert (result.exit_code, result.signal, result.cause) == (0, None, "clean")
    assert result.duration_s > 0


def test_nonzero_exit_is_reported_as_an_error(tmp_path: Path) -> None:
    agent_ = spawn(tmp_path, agent("exits_with.py", "3"))
    assert agent_.wait(5)
    result = agent_.result()
    assert (result.exit_code, result.signal, result.cause) == (3, None, "error")


def test_death_by_signal_is_reported_with_the_signal_name(tmp_path: Path) -> None:
    agent_ = spawn(tmp_path, agent("sleeper.py"))
    os.kill(agent_.pid, signal.SIGUSR1)
    assert agent_.wait(5)
    result = agent_.result()
    assert (result.exit_code, result.signal, result.cause) == (None, "SIGUSR1", "signal:SIGUSR1")


def test_agent_leads_its_own_session_in_the_work_dir(tmp_path: Path) -> None:
    script = "import os; print(os.getsid(0), os.getpgid(0), os.getcwd())"
    agent_ = AgentProcess.spawn(
        [sys.executable, "-I", "-c", script],
        cwd=tmp_path,
        env=os.environ,
        stdin_data=None,
        transcript=tmp_path / "t.log",
    )
    assert agent_.wait(5)
    sid, pgid, cwd = (tmp_path / "t.log").read_text().split()
    assert int(sid) == int(pgid) == agent_.pid == agent_.pgid
    assert Path(cwd) == tmp_path
    assert agent_.start_ticks > 0


def test_wait_times_out_and_terminate_stops_a_cooperative_agent(tmp_path: Path) -> None:
    agent_ = spawn(tmp_path, agent("sleeper.py"))
    assert not agent_.wait(0.2)
    started = time.monotonic()
    agent_.terminate(120)
    assert time.monotonic() - started < 60  # it went at SIGTERM, not at the grace's end
    result = agent_.result("timeout")
    assert (result.signal, result.cause) == ("SIGTERM", "timeout")


def test_agent_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    started = time.monotonic()
    agent_ = spawn(tmp_path, agent("ignores_sigterm.py", str(pids)))
    assert not agent_.wait(0.5)
    leader, member = map(int, wait_for_file(pids).split())
    assert leader == agent_.pid
    terminating = time.monotonic()
    agent_.terminate(0.3)
    assert time.monotonic() - terminating >= 0.3
    assert time.monotonic() - started >= 0.8
    assert agent_.result("timeout").signal == "SIGKILL"
    assert set(reap_leftovers()) <= {member}  # SIGKILLed with its group, it may still be dying
    assert group_members(agent_.pgid) == []
    assert gone(member)


def test_wake_fd_makes_wait_return_at_once_without_draining_it(tmp_path: Path) -> None:
    agent_ = spawn(tmp_path, agent("sleeper.py"))
    wake_r, wake_w = os.pipe()
    try:
        os.write(wake_w, b"x")
        started = time.monotonic()
        assert not agent_.wait(120, wake_fd=wake_r)
        assert time.monotonic() - started < 60
        assert os.read(wake_r, 1) == b"x"
    finally:
        os.close(wake_r)
        os.close(wake_w)
        agent_.terminate(1)


def test_wake_fd_cuts_the_grace_short(tmp_path: Path) -> None:
    agent_ = spawn(tmp_path, agent("ignores_sigterm.py", str(tmp_path / "pids")))
    wait_for_file(tmp_path / "pids")
    wake_r, wake_w = os.pipe()
    try:
        os.write(wake_w, b"x")
        started = time.monotonic()
        agent_.terminate(120, wake_fd=wake_r)
        assert time.monotonic() - started < 60
    finally:
        os.close(wake_r)
        os.close(wake_w)
    assert agent_.result("stopped").signal == "SIGKILL"
    reap_leftovers()


@pytest.mark.parametrize("ending", ["exit", "sleep"])
def test_setsid_grandchild_and_double_forked_daemon_are_reaped(tmp_path: Path, ending: str) -> None:
    pids = tmp_path / "pids"
    agent_ = spawn(tmp_path, agent("spawns_orphan.py", str(pids), ending))
    if ending == "exit":
        assert agent_.wait(5)
        assert agent_.result().cause == "clean"
    else:
        wait_for_file(pids)
        assert not agent_.wait(0.1)
        agent_.terminate(0.3)
        assert agent_.result("timeout").cause == "timeout"
    grandchild, daemon = map(int, pids.read_text().split())
    assert not gone(grandchild)
    assert not gone(daemon)
    assert {grandchild, daemon} <= set(reap_leftovers())
    assert gone(grandchild)
    assert gone(daemon)


def test_a_process_tree_that_keeps_forking_is_reaped_completely(
    tmp_path: Path, preexisting: set[int]
) -> None:
    tree = subprocess.Popen(agent("forks_forever.py", "30", str(tmp_path / "complete")))
    wait_for_file(tmp_path / "complete")
    killed = reap_leftovers(keep=preexisting)
    assert tree.pid in killed
    assert len(killed) >= 31
    assert strays._descendants(os.getpid(), preexisting) == {}
    tree.wait()  # already reaped by reap_leftovers; Popen copes with ECHILD


def test_reap_leftovers_spares_kept_processes_and_their_children(
    tmp_path: Path, preexisting: set[int]
) -> None:
    kept = subprocess.Popen(agent("ignores_sigterm.py", str(tmp_path / "kept")))
    _, kept_child = map(int, wait_for_file(tmp_path / "kept").split())
    agent_ = spawn(tmp_path, agent("spawns_orphan.py", str(tmp_path / "pids"), "exit"))
    assert agent_.wait(5)
    strays = set(map(int, (tmp_path / "pids").read_text().split()))
    try:
        assert set(reap_leftovers(keep={kept.pid, *preexisting})) == strays
        assert kept.poll() is None
        assert not gone(kept_child)
    finally:
        kept.kill()
        kept.wait()
    assert reap_leftovers(keep=preexisting) == [kept_child]


def test_prompt_on_stdin_arrives_byte_for_byte_even_at_one_mebibyte(tmp_path: Path) -> None:
    prompt = os.urandom(1 << 20)
    out = tmp_path / "out"
    out.mkdir()
    agent_ = AgentProcess.spawn(
        agent("echo_prompt.py"),
        cwd=tmp_path,
        env={**os.environ, "ECHO_OUT": str(out)},
        stdin_data=prompt,
        transcript=tmp_path / "t.log",
    )
    assert agent_.wait(10)
    assert agent_.result().cause == "clean"
    assert (out / "stdin.bin").read_bytes() == prompt


def test_prompt_as_argv_is_the_last_argument_and_stdin_is_empty(tmp_path: Path) -> None:
    prompt = "fix the tests\nthen 'commit' them — ü \"quoted\" $HOME"
    argv, stdin_data = deliver_prompt(agent("echo_prompt.py", "--flag"), prompt, "argv")
    assert stdin_data is None
    out = tmp_path / "out"
    out.mkdir()
    agent_ = AgentProcess.spawn(
        argv,
        cwd=tmp_path,
        env={**os.environ, "ECHO_OUT": str(out)},
        stdin_data=stdin_data,
        transcript=tmp_path / "t.log",
    )
    assert agent_.wait(5)
    assert json.loads((out / "argv.json").read_text())[-2:] == ["--flag", prompt]
    assert (out / "stdin.bin").read_bytes() == b""


def test_stdin_delivery_encodes_the_prompt() -> None:
    argv, stdin_data = deliver_prompt(["claude", "-p"], "héllo", "stdin")
    assert (argv, stdin_data) == (["claude", "-p"], "héllo".encode())


def test_environment_is_inherited_plus_agent_env_plus_round_variables(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    log_dir = tmp_path / "logs"
    transcript = transcript_path(log_dir, 42)
    base = {**os.environ, "INHERITED": "yes", "OVERRIDDEN": "base", "ECHO_OUT": str(out)}
    base["ECHO_VARS"] = "INHERITED,OVERRIDDEN,DISABLE_AUTOUPDATER,AGENT_RUNNER_ROUND,"
    base["ECHO_VARS"] += "AGENT_RUNNER_LOG_DIR,AGENT_RUNNER_TRANSCRIPT"
    env = agent_environment(
        {"OVERRIDDEN": "agent", "DISABLE_AUTOUPDATER": "1", "AGENT_RUNNER_ROUND": "spoofed"},
        round_no=42,
        log_dir=log_dir,
        transcript=transcript,
        base=base,
    )
    agent_ = AgentProcess.spawn(
        agent("echo_prompt.py"), cwd=tmp_path, env=env, stdin_data=None, transcript=transcript
    )
    assert agent_.wait(5)
    assert json.loads((out / "env.json").read_text()) == {
        "INHERITED": "yes",
        "OVERRIDDEN": "agent",
        "DISABLE_AUTOUPDATER": "1",
        "AGENT_RUNNER_ROUND": "42",
        "AGENT_RUNNER_LOG_DIR": str(log_dir),
        "AGENT_RUNNER_TRANSCRIPT": str(transcript),
    }
    assert transcript.name == "round-000042.log"


def test_stdout_and_stderr_are_appended_to_a_private_transcript(tmp_path: Path) -> None:
    transcript = tmp_path / "rounds" / "round-000001.log"
    transcript.parent.mkdir()
    transcript.write_text("earlier\n")
    transcript.chmod(0o600)
    out = tmp_path / "out"
    out.mkdir()
    agent_ = AgentProcess.spawn(
        agent("echo_prompt.py"),
        cwd=tmp_path,
        env={**os.environ, "ECHO_OUT": str(out)},
        stdin_data=b"",
        transcript=transcript,
    )
    assert agent_.wait(5)
    text = transcript.read_text()
    assert text.startswith("earlier\n")
    assert "echoed to stdout" in text
    assert "echoed to stderr" in text
    fresh = tmp_path / "logs"
    second = spawn(tmp_path, agent("exits_with.py", "0"))
    assert second.wait(5)
    assert transcript_path(fresh, 1).stat().st_mode & 0o777 == 0o600


def _hard_link(link: Path, target: Path) -> None:
    os.link(target, link)


@pytest.mark.parametrize(
    ("plant", "refusal"),
    [(Path.symlink_to, "it is a symlink"), (_hard_link, "it has 2 hard links")],
    ids=["symlink", "hard link"],
)
def test_a_transcript_that_names_another_file_is_refused_and_nothing_starts(
    tmp_path: Path, plant: Callable[[Path, Path], None], refusal: str
) -> None:
    # Appending to the transcript would write into the file it points to or shares an inode with.
    target = tmp_path / "operator.conf"
    target.write_text("precious\n")
    link = tmp_path / "round-000001.log"
    plant(link, target)
    before = own_children()
    with pytest.raises(SpawnError, match=rf"round-000001\.log: {refusal}"):
        AgentProcess.spawn(
            agent("exits_with.py", "0"),
            cwd=tmp_path,
            env=os.environ,
            stdin_data=None,
            transcript=link,
        )
    assert target.read_text() == "precious\n"
    assert own_children() == before


def test_symlinked_transcript_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rounds").symlink_to(elsewhere)
    with pytest.raises(SpawnError, match=r"folder .* symlink"):
        spawn(tmp_path, agent("exits_with.py", "0"))
    assert list(elsewhere.iterdir()) == []


def test_fifo_at_the_transcript_path_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "round-000001.log"
    os.mkfifo(fifo)
    with pytest.raises(SpawnError, match="transcript"):
        AgentProcess.spawn(
            agent("exits_with.py", "0"),
            cwd=tmp_path,
            env=os.environ,
            stdin_data=None,
            transcript=fifo,
        )


def test_an_exec_the_child_cannot_even_attempt_is_a_spawn_error_not_an_exit(
    tmp_path: Path,
) -> None:
    # execve refuses an empty variable name with ValueError before any system call.
    with pytest.raises(SpawnError, match="Invalid argument"):
        AgentProcess.spawn(
            agent("exits_with.py", "0"),
            cwd=tmp_path,
            env={**os.environ, "": "x"},
            stdin_data=None,
            transcript=tmp_path / "t.log",
        )


def test_missing_executable_is_a_spawn_error(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match="'no-such-agent-binary': not found"):
        AgentProcess.spawn(
            ["no-such-agent-binary", "-p"],
            cwd=tmp_path,
            env=os.environ,
            stdin_data=b"prompt",
            transcript=tmp_path / "t.log",
        )


def test_missing_work_dir_is_a_spawn_error(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match="missing"):
        AgentProcess.spawn(
            agent("exits_with.py", "0"),
            cwd=tmp_path / "missing",
            env=os.environ,
            stdin_data=None,
            transcript=tmp_path / "t.log",
        )


def test_prompt_too_long_for_argv_is_a_spawn_error_pointing_at_stdin(tmp_path: Path) -> None:
    argv, _ = deliver_prompt(agent("exits_with.py", "0"), "x" * (256 * 1024), "argv")
    with pytest.raises(SpawnError, match="deliver the prompt on stdin"):
        spawn(tmp_path, argv)


def test_kernel_without_pidfd_leaves_no_agent_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    before = own_children()
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    with pytest.raises(SpawnError, match="pidfd_open"):
        spawn(tmp_path, agent("sleeper.py"), stdin_data=b"prompt")
    assert own_children() == before


def test_blocked_sigterm_in_the_spawning_thread_is_refused(tmp_path: Path) -> None:
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        with pytest.raises(SpawnError, match="SIGTERM is blocked"):
            spawn(tmp_path, agent("exits_with.py", "0"))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def test_process_start_ticks_is_none_for_a_process_that_is_gone() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert process_start_ticks(child.pid) is None
    assert process_start_ticks(os.getpid()) == process_start_ticks(os.getpid())


def test_stat_parsing_survives_a_command_name_with_parentheses_and_spaces(tmp_path: Path) -> None:
    weird = tmp_path / "a) 1 2 (b"
    weird.write_bytes(Path("/bin/sleep").read_bytes())
    weird.chmod(0o755)
    child = subprocess.Popen([str(weird), "30"])
    try:
        entry = strays._read_stat(child.pid)
        assert entry is not None
        assert (entry.ppid, entry.pgrp) == (os.getpid(), os.getpgid(0))
        assert entry.start_ticks >= process_start_ticks(os.getpid())  # type: ignore[operator]
    finally:
        child.kill()
        child.wait()


def test_result_before_the_agent_is_reaped_is_a_bug(tmp_path: Path) -> None:
    agent_ = spawn(tmp_path, agent("sleeper.py"))
    with pytest.raises(RuntimeError, match="not been reaped"):
        agent_.result()
    agent_.terminate(1)
    agent_.terminate(1)  # a second stop of a reaped agent is harmless
    assert agent_.result("stopped").cause == "stopped"


def test_leftover_reaping_works_without_the_children_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(strays, "_HAVE_CHILDREN_FILES", False)
    pids = tmp_path / "pids"
    agent_ = spawn(tmp_path, agent("spawns_orphan.py", str(pids), "exit"))
    assert agent_.wait(5)
    grandchild, daemon = map(int, pids.read_text().split())
    assert {grandchild, daemon} <= set(reap_leftovers())
    assert gone(grandchild)
    assert gone(daemon)


ORPHANING_SERVE = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from agent_runner.supervisor.agent.process import AgentProcess
    agent = AgentProcess.spawn(sys.argv[1:], cwd=Path.cwd(), env=os.environ, stdin_data=None,
                               transcript=Path("serve-round.log"))
    while not Path("pids").exists():
        time.sleep(0.01)
    print(json.dumps({"pgid": agent.pgid, "ticks": agent.start_ticks}), flush=True)
    time.sleep(3600)
    """
)


def orphaned_group(tmp_path: Path) -> tuple[int, int, int]:
    """Run a serve that starts an agent, then SIGKILL that serve: (pgid, leader ticks, member)."""
    serve = subprocess.Popen(
        [sys.executable, "-c", ORPHANING_SERVE, *agent("ignores_sigterm.py", "pids")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    assert serve.stdout is not None
    record = json.loads(serve.stdout.readline())
    serve.kill()
    serve.wait()
    serve.stdout.close()
    leader, member = map(int, (tmp_path / "pids").read_text().split())
    assert leader == record["pgid"]
    return record["pgid"], record["ticks"], member


def kill_orphan_group(pgid: int, ticks: int | None) -> list[int]:
    return kill_orphans(Orphans(pgid=pgid, leader_start_ticks=ticks))


def test_orphaned_group_of_a_killed_serve_is_killed_when_start_ticks_match(
    tmp_path: Path,
) -> None:
    pgid, ticks, member = orphaned_group(tmp_path)
    assert sorted(kill_orphan_group(pgid, ticks)) == sorted([pgid, member])
    reap_leftovers()  # the orphans were reparented to this subreaper: collect the zombies
    assert gone(pgid)
    assert gone(member)


def test_orphaned_group_is_spared_when_the_leader_start_ticks_differ(tmp_path: Path) -> None:
    pgid, ticks, member = orphaned_group(tmp_path)
    assert kill_orphan_group(pgid, ticks + 1) == []
    assert kill_orphan_group(pgid, None) == []
    assert strays._read_stat(pgid) is not None
    assert strays._read_stat(member) is not None
    assert sorted(kill_orphan_group(pgid, ticks)) == sorted([pgid, member])


def test_orphaned_group_without_its_leader_loses_only_members_started_after_it(
    tmp_path: Path,
) -> None:
    pgid, ticks, member = orphaned_group(tmp_path)
    os.kill(pgid, signal.SIGKILL)
    os.waitpid(pgid, 0)  # reparented to us: reap it so its pid no longer exists
    member_ticks = process_start_ticks(member)
    assert member_ticks is not None
    assert kill_orphan_group(pgid, member_ticks + 1) == []
    assert kill_orphan_group(pgid, ticks) == [member]


def test_orphaned_group_of_another_user_is_left_alone(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another uid")
    pgid, ticks, member = orphaned_group(tmp_path)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # an unprivileged process finds the group but may not signal it
        try:
            os.setuid(65534)
            os.write(write_end, json.dumps(kill_orphan_group(pgid, ticks)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        assert json.loads(reader.read()) == []
    assert os.waitpid(child, 0)[1] == 0
    assert strays._read_stat(member) is not None
    assert sorted(kill_orphan_group(pgid, ticks)) == sorted([pgid, member])


def test_kill_orphan_group_never_touches_its_own_group() -> None:
    assert kill_orphan_group(os.getpgid(0), process_start_ticks(os.getpgid(0))) == []


def test_the_agent_starts_with_default_signals_and_only_stdio_open(tmp_path: Path) -> None:
    stray = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(stray, True)  # as a careless parent or library would leave one
    try:
        agent_ = AgentProcess.spawn(
            ["sh", "-c", "grep -E '^Sig(Blk|Ign):' /proc/self/status; ls /proc/self/fd"],
            cwd=tmp_path,
            env=os.environ,
            stdin_data=None,
            transcript=tmp_path / "t.log",
        )
        assert agent_.wait(5)
    finally:
        os.close(stray)
    lines = (tmp_path / "t.log").read_text().split()
    assert lines[0:3:2] == ["SigBlk:", "SigIgn:"]
    # The standard signals; above them glibc keeps a couple for itself.
    assert int(lines[1], 16) & 0x7FFFFFFF == 0
    assert int(lines[3], 16) & 0x7FFFFFFF == 0
    # 0-2, and the one `ls` opens to read the folder: nothing of ours came along.
    assert sorted(map(int, lines[4:])) == [0, 1, 2, 3]
