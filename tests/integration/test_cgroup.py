"""Round cgroups on this host's real cgroup v2: placement, kill as a unit, usage, what may be
killed after a crash, and the fallback where no cgroup can be had."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.supervisor.agent.cgroup import (
    CgroupUnavailable,
    RoundCgroup,
    RoundCgroups,
    locate,
    place,
)
from agent_runner.supervisor.agent.gate import GatedChild
from agent_runner.supervisor.agent.process import AgentProcess
from agent_runner.supervisor.agent.strays import become_subreaper, reap_leftovers
from tests.integration.conftest import AGENTS, REPO
from tests.integration.unprivileged import UNUSED_UID, run_as


def host_has_cgroups() -> bool:
    try:
        place("probe")
    except CgroupUnavailable:
        return False
    return True


pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="root creates cgroups here; the unprivileged side drops from root"
)


@pytest.fixture
def cgroups() -> Iterator[RoundCgroups]:
    if not host_has_cgroups():
        pytest.fail("root on this host gets a cgroup v2 subtree: these tests must run")
    become_subreaper()
    found = locate(uuid.uuid4().hex[:16])
    yield found
    for left in found.leftovers():
        left.kill()
        left.remove()
    found.close()
    assert not found.base.exists(), "the per-project folder goes when serve stops"


def test_an_agent_and_everything_it_forks_die_with_its_cgroup(
    cgroups: RoundCgroups, tmp_path: Path
) -> None:
    cgroup = cgroups.create(7)
    assert cgroup.path.name == "round-000007"
    pids = tmp_path / "pids"
    agent = AgentProcess.spawn(
        [sys.executable, str(AGENTS / "spawns_orphan.py"), str(pids), "sleep"],
        cwd=tmp_path,
        env=os.environ,
        stdin_data=None,
        transcript=tmp_path / "t.log",
        child=GatedChild.spawn(into=cgroup.procs),
    )
    while not pids.exists():
        assert not agent.wait(0.02), (tmp_path / "t.log").read_text()
    grandchild, daemon = map(int, pids.read_text().split())
    assert set(cgroup.pids()) == {agent.pid, grandchild, daemon}
    killed = cgroup.kill()
    assert set(killed) == {agent.pid, grandchild, daemon}
    assert cgroup.pids() == []
    assert "populated 0" in (cgroup.path / "cgroup.events").read_text()
    assert agent.wait(5)
    assert agent.result().signal == "SIGKILL"
    usage = cgroup.usage()
    assert usage.cpu_s is not None and usage.cpu_s > 0
    # memory.peak only exists where the memory controller reaches the cgroup.
    assert (usage.memory_peak_bytes is None) == (not (cgroup.path / "memory.peak").exists())
    assert set(reap_leftovers()) <= {grandchild, daemon}  # the zombies, collected
    cgroup.remove()
    assert not cgroup.path.exists()


def test_a_stale_cgroup_of_the_same_round_is_emptied_before_reuse(cgroups: RoundCgroups) -> None:
    stale = cgroups.create(3)
    sleeper = subprocess.Popen(["sleep", "60"])
    stale.procs.write_text(str(sleeper.pid))
    fresh = cgroups.create(3)
    assert sleeper.wait(5) == -9
    assert fresh.pids() == []


def test_only_this_projects_round_cgroups_may_be_killed_from_state(
    cgroups: RoundCgroups, tmp_path: Path
) -> None:
    key = cgroups.base.name.removeprefix("agent-runner-")
    ours = cgroups.create(1)
    assert cgroups.recorded(str(ours.path), key) is not None
    fake = tmp_path / "round-000001"
    fake.mkdir()
    (fake / "cgroup.kill").write_text("")
    (fake / "cgroup.events").write_text("populated 1\n")
    other = cgroups.base.parent / "agent-runner-someoneelse" / "round-000001"
    for forged in (
        str(fake),  # not a cgroup at all: killing it would hang on a file
        str(other),  # another project's round
        str(cgroups.base.parent),  # not a round
        str(cgroups.base / "round-000001" / ".." / "round-000001"),
        str(cgroups.base / "round-1"),
        42,
        None,
    ):
        assert cgroups.recorded(forged, key) is None, forged


def test_leftovers_lists_every_round_cgroup_a_dead_serve_left(cgroups: RoundCgroups) -> None:
    made = [cgroups.create(n) for n in (4, 5)]
    (cgroups.base / "not-a-round").mkdir()
    try:
        assert [c.path for c in cgroups.leftovers()] == [c.path for c in made]
    finally:
        (cgroups.base / "not-a-round").rmdir()


def test_a_cgroup_of_our_own_takes_the_rounds_directly(cgroups: RoundCgroups) -> None:
    own = cgroups.base.parent / f"agent-runner-test-own-{uuid.uuid4().hex[:8]}"
    own.mkdir()
    script = textwrap.dedent(
        """
        import json
        from agent_runner.supervisor.agent.cgroup import place
        p = place("k")
        print(json.dumps([str(p.here), str(p.base), p.shared]))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
            # As systemd starts a service with Delegate=yes: alone in a cgroup of its own.
            preexec_fn=lambda: (own / "cgroup.procs").write_text("0"),
        )
        here, base, shared = json.loads(done.stdout)
    finally:
        own.rmdir()
    assert (here, base, shared) == (str(own), str(own), False)


def test_an_ordinary_user_is_told_why_there_is_no_cgroup() -> None:
    def where() -> str:
        try:
            place("k")
        except CgroupUnavailable as exc:
            return str(exc)
        return "placed"

    reason = run_as(UNUSED_UID, where)
    assert reason.startswith("no permission to create cgroups")


def test_a_removed_cgroup_is_nothing_to_kill() -> None:
    assert RoundCgroup(Path("/sys/fs/cgroup/unified/agent-runner-none/round-000001")).kill() == []
