"""SIGKILL of serve at each step of a round, then a second serve: never two agents of the
project alive at once, and nothing of the first serve's round left once the second spawns.

Each scenario runs with a cgroup per round (root, this host's cgroup v2) and without one
(`round_cgroup = "off"`, and an ordinary user who may not create cgroups). A sampler thread
watches /proc the whole time. The first serve is the real CLI; where the
step is inside serve, it kills itself exactly there (killed_serve.py), as an outside SIGKILL
landing then would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from agent_runner.events import iter_events
from agent_runner.supervisor.agent.prefork import AHEAD
from agent_runner.supervisor.agent.strays import become_subreaper
from tests.integration.conftest import AGENTS, REPO, init_work_tree
from tests.integration.unprivileged import UNUSED_UID, chown_tree, owned_dir
from tests.unprivileged import command

GENERATIONS = ("gen1", "gen2")
# Steps inside serve, reached by the first serve killing itself there.
INSIDE = ("before_spawn", "between_fork_and_exec", "during_state_write", "recorded_not_released")
# Steps reached from outside: the agent running, and serve's own git securing the tree.
OUTSIDE = ("mid_round", "during_git")
STEPS = (*INSIDE, *OUTSIDE)
WAIT_S = 30.0
HARNESS = Path(__file__).with_name("killed_serve.py")


@pytest.fixture(autouse=True, scope="module")
def subreaper() -> None:
    """Like systemd, this process adopts what a killed serve leaves (so it can be checked)."""
    become_subreaper()


@dataclass
class Scene:
    root: Path
    work_dir: Path
    log_dir: Path
    config: Path
    uid: int | None
    serves: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def first(self) -> str:
        """The first serve's generation: its agents carry it (unique to this scene, and to this
        test process: another run of this suite on the host has scenes of the same name)."""
        return f"{os.getpid()}-{self.root.name}-{GENERATIONS[0]}"

    @property
    def second(self) -> str:
        return f"{os.getpid()}-{self.root.name}-{GENERATIONS[1]}"

    def kill_everything(self) -> None:
        """Whatever a failed scenario left: both serves and every agent process they made."""
        for serve in self.serves:
            serve.kill()
            serve.wait()
        for pids in agents_alive((self.first, self.second)).values():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for pid in [*self.pids(self.first), *self.pids(self.second)]:
            wait_until(lambda pid=pid: gone(pid), f"process {pid} to die")

    def pids(self, generation: str) -> list[int]:
        path = self.root / f"{generation}.pids"
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in iter_events(self.log_dir) if e["event"] == kind]

    def kinds(self) -> list[str]:
        return [e["event"] for e in iter_events(self.log_dir)]


def write_project(
    root: Path,
    uid: int | None,
    agent: dict[str, Any],
    runtime: dict[str, Any],
    breakers: dict[str, int],
) -> tuple[Path, Path, Path]:
    """A work tree and its config beneath `root` (owned by `uid`): work_dir, log_dir, config."""
    work_dir, log_dir = root / "work", root / "logs"
    init_work_tree(work_dir)
    config = work_dir / "agent-runner.toml"
    document = {
        "schema_version": 1,
        "agent": {"parser": "none", **agent},
        "runtime": {"log_dir": str(log_dir), "restart_delay_s": 0, **runtime},
        "breakers": breakers,
    }
    config.write_text(tomli_w.dumps(document))
    if uid is not None:
        chown_tree(root, uid)
    return work_dir, log_dir, config


def make_scene(root: Path, *, uid: int | None, round_cgroup: str, agent_args: list[str]) -> Scene:
    command = [sys.executable, str(AGENTS / "escapes.py"), str(root), *agent_args]
    work_dir, log_dir, config = write_project(
        root,
        uid,
        {"command": command, "sigterm_grace_s": 0.5},
        {"round_budget_s": 600, "round_cgroup": round_cgroup},
        {"stalled_rounds": 100},
    )
    return Scene(root, work_dir, log_dir, config, uid)


def launch(
    scene: Scene, generation: str, *, kill_at: str | None, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start `agent-runner serve` (the real CLI, as the scene's user)."""
    args = [str(HARNESS), kill_at or "none", str(scene.root / f"{generation}.gated")]
    args.append(str(scene.config))
    argv = [sys.executable, *args] if scene.uid is None else command(*args, uid=scene.uid)
    with (scene.root / f"{generation}.serve.log").open("wb") as log:
        serve = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**os.environ, **env, "TEST_GENERATION": generation, "HOME": str(scene.root)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    scene.serves.append(serve)
    return serve


def git_that_kills_serve(scene: Scene) -> dict[str, str]:
    """A `git` first on PATH that, once, leaves what a killed git leaves and SIGKILLs serve
    (its parent) while serve snapshots the tree; then hangs on like a slow git."""
    real = shutil.which("git")
    folder = scene.root / "bin"
    folder.mkdir()
    trigger, sleeper = scene.root / "git-trigger", scene.root / "git-sleeper"
    trigger.touch()
    script = folder / "git"
    script.write_text(
        f"""#!/bin/sh
case "$GIT_INDEX_FILE" in
  *agent-runner-snapshot-*)
    if rm {trigger} 2>/dev/null; then
      git_dir=$(dirname "$(dirname "$GIT_INDEX_FILE")")
      : > "$git_dir/index.lock"
      mkdir -p "$git_dir/objects/pack" && : > "$git_dir/objects/pack/tmp_pack_x1"
      sleep 300 &
      echo $! > {sleeper}
      kill -KILL $PPID
      sleep 300
    fi
    ;;
esac
exec {real} "$@"
"""
    )
    script.chmod(0o755)
    if scene.uid is not None:
        chown_tree(folder, scene.uid)
        os.lchown(trigger, scene.uid, scene.uid)
    return {"PATH": f"{folder}:{os.environ['PATH']}"}


class Sampler(threading.Thread):
    """Watches /proc without pause for the agents of each serve generation."""

    def __init__(self, generations: tuple[str, str]) -> None:
        super().__init__(daemon=True)
        self.generations = generations
        self.done = threading.Event()
        self.overlaps: list[dict[str, set[int]]] = []
        self.seen: dict[str, set[int]] = {g: set() for g in generations}
        self.samples = 0

    def run(self) -> None:
        while not self.done.is_set():
            alive = agents_alive(self.generations)
            for generation, pids in alive.items():
                self.seen.setdefault(generation, set()).update(pids)
            if len(alive) > 1:
                self.overlaps.append(alive)
            self.samples += 1

    def stop(self) -> None:
        self.done.set()
        self.join()


def agents_alive(generations: tuple[str, ...]) -> dict[str, set[int]]:
    """Live (not zombie) agent processes of each generation, by argv tag or environment."""
    found: dict[str, set[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        generation = _generation(int(name), generations)
        if generation is not None:
            found.setdefault(generation, set()).add(int(name))
    return found


def _generation(pid: int, generations: tuple[str, ...]) -> str | None:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"escape" not in cmdline:  # escapes.py, or an escapee-<generation> it left
            return None
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        for generation in generations:
            if f"escapee-{generation}".encode() in cmdline:
                return generation
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for generation in generations:
        if f"TEST_GENERATION={generation}".encode() in environ:
            return generation
    return None


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def reap(pid: int) -> int | None:
    """Collect `pid` if it is our child (or was adopted by us); its exit status."""
    with contextlib.suppress(ChildProcessError):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
    return None


def gone(pid: int) -> bool:
    """Dead: gone from /proc, or a zombie (collected here when it is ours)."""
    reap(pid)
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@contextlib.contextmanager
def scene_for(tmp_path: Path, mode: str, agent_args: list[str]) -> Iterator[Scene]:
    if mode == "unprivileged":
        with owned_dir(UNUSED_UID) as root:
            yield make_scene(root, uid=UNUSED_UID, round_cgroup="auto", agent_args=agent_args)
    else:
        round_cgroup = "auto" if mode == "cgroup" else "off"
        yield make_scene(tmp_path, uid=None, round_cgroup=round_cgroup, agent_args=agent_args)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("mode", ["cgroup", "fallback", "unprivileged"])
def test_serve_killed_at_any_step_never_leaves_two_agents_or_anything_of_its_round(
    tmp_path: Path, isolated_git: None, mode: str, step: str
) -> None:
    if mode == "cgroup" and not _root_may_create_cgroups():
        pytest.fail("this host gives root a cgroup v2 subtree: the cgroup path must be tested")
    args = ["exit-gen1"] if step == "during_git" else (["scrub"] if mode == "cgroup" else [])
    with scene_for(tmp_path, mode, args) as scene:
        try:
            _run_scenario(scene, step, mode)
        except BaseException:
            for log in sorted(scene.root.glob("*.serve.log")):
                print(f"--- {log.name}\n{log.read_text()}")
            raise
        finally:
            scene.kill_everything()


def _run_scenario(scene: Scene, step: str, mode: str) -> None:
    first, second = scene.first, scene.second
    env = git_that_kills_serve(scene) if step == "during_git" else {}
    sampler = Sampler((first, second))
    sampler.start()
    try:
        serve = launch(scene, first, kill_at=step if step in INSIDE else None, env=env)
        if step == "mid_round":
            wait_until(lambda: len(scene.pids(first)) >= 3, "the first round's escapees")
            # Mid-round means after the round was announced: the escapees can be quicker.
            wait_until(lambda: scene.events("agent_spawn"), "the first round's agent_spawn")
            serve.kill()
        assert serve.wait(timeout=WAIT_S) == -signal.SIGKILL
        assert not scene.events("serve_stop"), "only a SIGKILL may end the first serve"
        left_running = agents_alive((first,)).get(first, set())

        spawned = len(scene.events("agent_spawn"))
        successor = launch(scene, second, kill_at=None, env=env)
        wait_until(lambda: len(scene.pids(second)) >= 3, "the second serve's agent")
        # Its agent can run before serve writes agent_spawn (the event follows the exec).
        wait_until(lambda: len(scene.events("agent_spawn")) > spawned, "the second agent_spawn")
        survivors = agents_alive((first,)).get(first, set())
    finally:
        sampler.stop()
    assert sampler.samples > 10
    assert sampler.overlaps == [], "two serves' agents were alive at the same instant"
    assert survivors == set(), "something of the first round outlived the second's spawn"
    _check_step(scene, step, mode, left_running, sampler)
    successor.terminate()
    assert successor.wait(timeout=WAIT_S) == 0
    for pid in [*scene.pids(first), *scene.pids(second)]:
        wait_until(lambda pid=pid: gone(pid), f"process {pid} to be reaped")


def _check_step(
    scene: Scene, step: str, mode: str, left_running: set[int], sampler: Sampler
) -> None:
    first = scene.first
    kinds = scene.kinds()
    second_start = [i for i, kind in enumerate(kinds) if kind == "serve_start"][1]
    orphans = scene.events("round_orphan_reaped")
    if step in INSIDE:
        # The agent's program never ran: its gate stayed shut once serve died.
        assert sampler.seen[first] == set()
        assert scene.pids(first) == []
    if step != "before_spawn" and step in INSIDE:
        held = int((scene.root / f"{first}.gated").read_text())
        wait_until(lambda: gone(held), "the agent held at its gate to exit")
    if step == "mid_round":
        assert left_running >= set(scene.pids(first)), "escapees outlive a killed serve at first"
        assert orphans, "the second serve reports what it killed"
        assert set(scene.pids(first)) <= set(orphans[-1]["pids"])
        # Killed while the second serve booted, before it spawned anything.
        assert kinds.index("agent_spawn") < kinds.index("round_orphan_reaped") < second_start
    if step == "during_git":
        sleeper = int((scene.root / "git-sleeper").read_text())
        wait_until(lambda: gone(sleeper), "the killed git's child")
        git_dir = scene.work_dir / ".git"
        assert not list(git_dir.glob("agent-runner-snapshot-*"))
        assert not (git_dir / "index.lock").exists()
        assert not (git_dir / "objects" / "pack" / "tmp_pack_x1").exists()
        cleared = scene.events("git_leftovers_cleared")
        assert cleared and any("index.lock" in p for p in cleared[-1]["paths"])
    spawn = scene.events("agent_spawn")[-1]
    unavailable = scene.events("round_cgroup_unavailable")
    if mode == "cgroup":
        assert unavailable == []
        current = Path(spawn["cgroup"])
        assert current.is_dir()
        # Whatever the dead serve made is gone: only this round's cgroup and those of the
        # rounds whose children already wait (prefork) exist.
        number = int(current.name.removeprefix("round-"))
        waiting = {current.parent / f"round-{number + n:06d}" for n in range(1, AHEAD + 1)}
        assert set(current.parent.glob("round-*")) <= {current, *waiting}
    else:
        assert spawn["cgroup"] is None
        assert unavailable, "the fallback is announced"
        if mode == "fallback":
            assert unavailable[-1]["reason"] == 'runtime.round_cgroup is "off"'
        else:
            assert "no permission" in unavailable[-1]["reason"]


def _root_may_create_cgroups() -> bool:
    from agent_runner.supervisor.agent.cgroup import CgroupUnavailable, place

    try:
        place("probe")
    except CgroupUnavailable:
        return False
    return os.geteuid() == 0


@dataclass
class Killable:
    """A project for the kill tests below, in one mode: its root, config and log_dir, and
    how to run a script or module as the project's user."""

    root: Path
    config: Path
    log_dir: Path
    uid: int | None

    def run(self, target: str, *args: str) -> subprocess.CompletedProcess[str]:
        if self.uid is not None:
            argv = command(target, *args, uid=self.uid)
        else:
            argv = [sys.executable, *([target] if target.endswith(".py") else ["-m", target])]
            argv += args
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=WAIT_S)


@contextlib.contextmanager
def killable(tmp_path: Path, mode: str, script: str, **breakers: int) -> Iterator[Killable]:
    """`sh -c script` as the agent, restart_delay_s = 0, in `mode` (cgroup: root with a cgroup
    per round; fallback: root without; unprivileged: an unused uid); $ROOT is the root."""
    with contextlib.ExitStack() as stack:
        uid = UNUSED_UID if mode == "unprivileged" else None
        root = tmp_path if uid is None else stack.enter_context(owned_dir(uid))
        _, log_dir, config = write_project(
            root,
            uid,
            {"command": ["sh", "-c", script.replace("$ROOT", str(root))]},
            {"round_cgroup": "off" if mode == "fallback" else "auto"},
            dict(breakers),
        )
        yield Killable(root, config, log_dir, uid)


@pytest.mark.parametrize("mode", ["cgroup", "fallback", "unprivileged"])
def test_serve_killed_after_the_one_write_that_ends_a_round_and_records_the_next_agent(
    tmp_path: Path, isolated_git: None, mode: str
) -> None:
    """Between two rounds one write carries both the round that ended and the next agent's
    record (restart_delay_s = 0). Killed after it, before the exec: the next agent never runs
    and its record is there for the successor, and so is the ended round: counted, it trips
    the crash-loop breaker one round later, as if serve had never died."""
    with killable(tmp_path, mode, "echo x >> $ROOT/ran; exit 1", crash_loop_rounds=2) as scene:
        held_file, ran = scene.root / "held", scene.root / "ran"
        first = scene.run(
            str(HARNESS), "next_recorded_not_released", str(held_file), str(scene.config)
        )
        assert first.returncode == -signal.SIGKILL, first.stderr
        held = int(held_file.read_text())
        state = json.loads((scene.log_dir / "state.json").read_text())
        assert (state["supervisor"]["phase"], state["round"]["number"]) == ("running", 2)
        assert state["round"]["pid"] == held
        assert (state["last_round"]["round"], state["last_round"]["exit_cause"]) == (1, "error")
        assert state["loop"]["crash_streak"] == 1, "round 1 was written with round 2's record"
        wait_until(lambda: gone(held), "the agent held at its gate to exit")
        assert ran.read_text() == "x\n", "round 2's program never ran"

        second = scene.run("agent_runner", "serve", "--config", str(scene.config))
        assert second.returncode == 69, second.stderr
        events = list(iter_events(scene.log_dir))
        assert [e["count"] for e in events if e["event"] == "crash_loop"] == [2]
        assert [e["round"] for e in events if e["event"] == "round_start"] == [1, 2, 3]
        assert ran.read_text() == "x\nx\n"


@pytest.mark.parametrize("mode", ["fallback", "unprivileged"])
def test_rounds_whose_agent_never_started_are_each_in_the_state_before_the_next(
    tmp_path: Path, isolated_git: None, mode: str
) -> None:
    """A round whose agent could not even be started (fork failed) is followed by no agent's
    record either: its end is written at once, so a SIGKILL during a run of such rounds
    loses none of them to the breakers."""
    with killable(tmp_path, mode, "exit 1") as scene:
        unused = str(scene.root / "unused")
        killed = scene.run(str(HARNESS), "children_fail_after_round_1", unused, str(scene.config))
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        events = list(iter_events(scene.log_dir))
        assert [e["round"] for e in events if e["event"] == "agent_spawn"] == [1]
        assert [e["round"] for e in events if e["event"] == "agent_spawn_failed"] == [2]
        state = json.loads((scene.log_dir / "state.json").read_text())
        assert state["supervisor"]["phase"] == "between_rounds"
        assert (state["last_round"] or {}).get("round") == 2, "round 2's end was written"
        assert state["loop"]["crash_streak"] == 2, "both failed rounds are counted"
