"""log_dir turning read-only or filling up under a running serve, as root and as a user.

Neither stops supervision or brings a traceback: each refusal is said once, no agent runs
without its transcript, and once the disk takes writes again state.json and the event log
are current. Read-only for root is a read-only bind mount (root ignores file modes); for a
user, the modes of its own folders. A full disk is a small tmpfs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_runner.events import iter_events
from agent_runner.supervisor.loop.state import read_state
from tests.integration.conftest import Project, create_project
from tests.integration.unprivileged import UNUSED_UID, chown_tree, require_root
from tests.unprivileged import REPO, command

MODES = ("root", "unprivileged")
WAIT_S = 30.0
AGENT = ["sh", "-c", "echo working; sleep 0.2"]
# Quick retries, and no breaker in the way: what is tested is the disk, not the policy.
RUNTIME = {"restart_delay_s": 0.05, "max_restart_delay_s": 0.2}
BREAKERS = {"crash_loop_rounds": 10_000, "stalled_rounds": 10_000}


@dataclass
class Scene:
    project: Project
    uid: int | None
    console: Path
    serve: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ("agent_runner", "serve", "--config", str(self.project.config_path))
        argv = [sys.executable, "-m", *args] if self.uid is None else command(*args, uid=self.uid)
        with self.console.open("wb") as out:
            self.serve = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> int:
        assert self.serve is not None
        self.serve.send_signal(signal.SIGTERM)
        return self.serve.wait(timeout=WAIT_S)

    def lines(self) -> list[str]:
        return self.console.read_text(errors="replace").splitlines()

    def console_kinds(self) -> list[str]:
        """Event kinds in the order serve's console printed them (`HH:MM:SS kind ...`)."""
        return [line.split()[1] for line in self.lines() if line[:2].isdigit() and " " in line]

    def logged(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in iter_events(self.project.log_dir) if e["event"] == kind]


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def scene(mode: str, tmpfs_bytes: int | None = None) -> Iterator[Scene]:
    require_root()
    uid = UNUSED_UID if mode == "unprivileged" else None
    root = Path(tempfile.mkdtemp(prefix="agent-runner-faults-", dir="/tmp"))
    project = create_project(root)
    project.write_config(AGENT, runtime=RUNTIME, breakers=BREAKERS)
    mounted = False
    try:
        if tmpfs_bytes is not None:
            project.log_dir.mkdir()
            owner = 0 if uid is None else uid
            options = f"size={tmpfs_bytes},mode=0700,uid={owner},gid={owner}"
            mount("-t", "tmpfs", "-o", options, "tmpfs", str(project.log_dir))
            mounted = True
        if uid is not None:
            chown_tree(root, uid)
        current = Scene(project, uid, root / "console.log")
        try:
            yield current
        finally:
            if current.serve is not None and current.serve.poll() is None:
                current.serve.kill()
                current.serve.wait()
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(project.log_dir)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"root could not mount ({done.stderr.strip()}): this test needs it")


@contextlib.contextmanager
def read_only(log_dir: Path, uid: int | None) -> Iterator[str]:
    """log_dir refuses every new file while inside; the error its writers get."""
    if uid is None:
        # Made read-only where nobody writes, then put over log_dir: a file serve opened for
        # writing in between would make the remount busy.
        staging = Path(tempfile.mkdtemp(prefix="agent-runner-ro-"))
        try:
            mount("--bind", str(log_dir), str(staging))
            try:
                mount("-o", "remount,bind,ro", str(staging))
                mount("--bind", str(staging), str(log_dir))  # read-only from its first instant
            finally:
                subprocess.run(["umount", str(staging)], check=True)
        finally:
            staging.rmdir()
        try:
            yield "Read-only file system"
        finally:
            subprocess.run(["umount", str(log_dir)], check=True)
        return
    folders = [log_dir, log_dir / "rounds"]
    for folder in folders:
        folder.chmod(0o500)
    try:
        yield "Permission denied"
    finally:
        for folder in folders:
            folder.chmod(0o700)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_read_only_log_dir_pauses_the_rounds_until_it_is_writable_again(mode: str) -> None:
    with scene(mode) as current:
        log_dir = current.project.log_dir
        current.start()
        wait_until(lambda: len(current.logged("round_end")) >= 2, "two rounds")
        with read_only(log_dir, current.uid) as refusal:
            # The event log stays open for appending: the refusals are in it.
            wait_until(lambda: len(current.logged("agent_spawn_failed")) >= 3, "refused rounds")
        failed = current.logged("agent_spawn_failed")
        last_refused = failed[-1]["round"]
        wait_until(
            lambda: any(e["round"] > last_refused for e in current.logged("agent_exit")),
            "a round after the disk came back",
        )
        assert current.stop() == 0
        lines = current.lines()
        assert not [line for line in lines if "Traceback" in line]
        for event in failed:
            assert f"refusing the transcript {log_dir}/rounds/round-" in event["reason"]
            assert refusal in event["reason"]
        # A refused round ran no agent: every spawned round has its transcript.
        spawned = {e["round"] for e in spawns_with_transcripts(log_dir)}
        assert not spawned & {e["round"] for e in failed}
        (state_failure,) = [e for e in iter_events(log_dir) if e["event"] == "state_write_failed"]
        assert state_failure["reason"].endswith(f"'{log_dir}/state.json'")
        assert refusal in state_failure["reason"]
        state = read_state(log_dir)
        assert state["supervisor"]["phase"] == "stopped"
        assert state["last_round_number"] == max(
            e["round"] for e in iter_events(log_dir) if "round" in e
        )


def spawns_with_transcripts(log_dir: Path) -> list[dict[str, Any]]:
    spawns = [e for e in iter_events(log_dir) if e["event"] == "agent_spawn"]
    for spawn in spawns:
        assert Path(spawn["transcript"]).is_file()
    return spawns


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_full_disk_costs_what_cannot_be_written_and_never_the_rounds(mode: str) -> None:
    with scene(mode, tmpfs_bytes=1 << 20) as current:
        log_dir = current.project.log_dir
        current.start()
        wait_until(lambda: len(current.logged("round_end")) >= 2, "two rounds")
        filler = log_dir / "filler"
        # As root, on a tmpfs that keeps nothing in reserve: every block is taken.
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        written = len(current.logged("round_end"))
        full_at = current.console_kinds().count("round_end")
        # The events file still has room in its last page for a round or two.
        wait_until(
            lambda: "agent-runner: cannot write events" in current.console.read_text(),
            "the event log to be refused",
        )
        lost_at = current.console_kinds().count("round_end")
        wait_until(
            lambda: current.console_kinds().count("round_end") >= lost_at + 3,
            "three rounds with no event log",
        )
        filler.unlink()
        during = current.console_kinds().count("round_end") - full_at
        assert full_at >= written
        ended = current.console_kinds().count("round_end")
        wait_until(
            lambda: any(e["round"] > ended for e in current.logged("round_end")),
            "a round evented on disk again",
        )
        assert current.stop() == 0
        lines = current.lines()
        assert not [line for line in lines if "Traceback" in line]
        # The console (the journal under systemd) had every round; the file lost some of them.
        assert during >= 3
        assert (
            len([line for line in lines if line.startswith("agent-runner: cannot write events")])
            == 1
        )
        kinds = [line.split()[1] for line in lines if line[:2].isdigit()]
        assert kinds.count("state_write_failed") == 1
        assert kinds.count("transcript_write_failed") >= 1
        assert "No space left on device" in next(
            line for line in lines if "state_write_failed" in line
        )
        # What was written after the disk came back is whole, after a torn line if there was one.
        events = list(iter_events(log_dir))
        assert events[-1]["event"] == "serve_stop"
        for path in log_dir.glob("events-*.jsonl"):
            last = path.read_bytes().splitlines()[-1]
            assert json.loads(last)["event"] == "serve_stop"
        state = read_state(log_dir)
        assert state["supervisor"]["phase"] == "stopped"
        assert state["last_round_number"] == max(e["round"] for e in events if "round" in e)


@pytest.mark.slow
def test_a_users_serve_whose_log_dir_is_removed_stops_with_log_dir_lost() -> None:
    """As test_single_instance.py checks for root: exit 1, said on the console, agent gone."""
    with scene("unprivileged") as current:
        current.project.write_config(["sleep", "600"], runtime=RUNTIME, breakers=BREAKERS)
        chown_tree(current.project.root, UNUSED_UID)
        current.start()
        wait_until(lambda: bool(current.logged("agent_spawn")), "the agent")
        (spawn,) = current.logged("agent_spawn")
        shutil.rmtree(current.project.log_dir)
        assert current.serve is not None
        assert current.serve.wait(timeout=WAIT_S) == 1
        lines = current.lines()
        assert any("log_dir_lost" in line and "round=" not in line for line in lines)
        assert any(
            "serve_stop" in line and "log dir lost" in line.replace("_", " ") for line in lines
        )
        assert not [line for line in lines if "Traceback" in line]
        deadline = time.monotonic() + WAIT_S
        while os.path.exists(f"/proc/{spawn['pid']}") and not zombie(spawn["pid"]):
            assert time.monotonic() < deadline, "the agent outlived its serve"
            time.sleep(0.05)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
