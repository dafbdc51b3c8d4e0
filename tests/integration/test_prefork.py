"""Children started ahead for the next rounds: used in order, never leaked, cgroups with them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.supervisor.agent.cgroup import CgroupUnavailable, RoundCgroups, locate
from agent_runner.supervisor.agent.prefork import AHEAD, Prefork
from agent_runner.supervisor.agent.process import AgentProcess


def never(reason: str) -> None:
    raise AssertionError(f"unexpected fallback: {reason}")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def cgroups() -> Iterator[RoundCgroups | None]:
    try:
        found = locate(uuid.uuid4().hex[:16])
    except CgroupUnavailable:
        if os.geteuid() == 0:
            pytest.fail("root on this host gets a cgroup: the cgroup side must be tested")
        yield None
        return
    yield found
    found.close()


def test_the_next_rounds_are_ready_and_taken_in_order(
    cgroups: RoundCgroups | None, tmp_path: Path
) -> None:
    prefork = Prefork()
    prefork.prepare(4, cgroups, never)
    waiting = prefork.pids()
    assert len(waiting) == AHEAD
    taken = prefork.take(5, cgroups, never)
    assert taken.child.pid == waiting[0]
    if cgroups is not None:
        assert taken.cgroup is not None and taken.cgroup.path.name == "round-000005"
        assert taken.cgroup.pids() == [taken.child.pid], "it moved itself in before its round"
    agent = AgentProcess.spawn(
        ["true"],
        cwd=tmp_path,
        env=os.environ,
        stdin_data=None,
        transcript=tmp_path / "t.log",
        child=taken.child,
    )
    assert agent.wait(5)
    assert agent.result().cause == "clean"
    prefork.close()
    assert prefork.pids() == ()
    assert not any(alive(pid) for pid in waiting[1:])
    if cgroups is not None:
        assert [c.path.name for c in cgroups.leftovers()] == ["round-000005"]
        taken.cgroup.remove()  # type: ignore[union-attr]


def test_a_child_for_a_round_that_never_came_is_discarded(cgroups: RoundCgroups | None) -> None:
    prefork = Prefork()
    prefork.prepare(1, cgroups, never)
    stale = prefork.pids()
    fresh = prefork.take(9, cgroups, never)
    assert fresh.child.pid not in stale
    assert not any(alive(pid) for pid in stale)
    fresh.child.abandon()
    if fresh.cgroup is not None:
        fresh.cgroup.remove()
    prefork.close()
    if cgroups is not None:
        assert cgroups.leftovers() == []
