"""The next rounds' agents, started and put in their cgroups while the current agent runs.

A gated child is a fresh small interpreter (~10 ms to start) and moving a process into a
cgroup can wait out an RCU grace period (~10 ms). Done ahead, for the next two rounds so
that even an agent that exits at once finds its successor ready, neither falls between one
agent's exit and the next one's exec. Each child waits at its gate and holds nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from agent_runner.supervisor.agent.cgroup import CgroupUnavailable, RoundCgroup, RoundCgroups
from agent_runner.supervisor.agent.gate import GatedChild

AHEAD = 2


@dataclass(frozen=True)
class Prepared:
    """A gated child for round `number`, in that round's cgroup when there is one."""

    number: int
    child: GatedChild
    cgroup: RoundCgroup | None


class Prefork:
    """Holds the gated children of the next rounds, by round number.

    `landlock`: the children load what confining their agent takes while they wait.
    """

    def __init__(self, *, landlock: bool = False) -> None:
        self._ready: dict[int, Prepared] = {}
        self.landlock = landlock

    def take(
        self, number: int, cgroups: RoundCgroups | None, failed: Callable[[str], None]
    ) -> Prepared:
        """The child for round `number`: the one started ahead, else one started now.

        Raises OSError when starting it fails.
        """
        for stale in [n for n in self._ready if n < number]:
            _discard(self._ready.pop(stale))
        ready = self._ready.pop(number, None) or _start(number, cgroups, failed, self.landlock)
        problem = ready.child.placed()
        if problem is None or ready.cgroup is None:
            return ready
        # It stays where it was started: a round without a cgroup, and the reason said once.
        ready.cgroup.remove()
        failed(f"cannot move a process into {ready.cgroup.path}: {problem.strerror}")
        return Prepared(number, ready.child, None)

    def prepare(
        self, after: int, cgroups: RoundCgroups | None, failed: Callable[[str], None]
    ) -> None:
        """Start the children of the rounds after `after`; one that fails is retried later."""
        for number in range(after + 1, after + 1 + AHEAD):
            if number not in self._ready:
                with contextlib.suppress(OSError):
                    self._ready[number] = _start(number, cgroups, failed, self.landlock)

    def pids(self) -> tuple[int, ...]:
        """The waiting children's pids (round-end reaping must spare them)."""
        return tuple(f.child.pid for f in self._ready.values())

    def close(self) -> None:
        """Kill the waiting children and remove their cgroups."""
        while self._ready:
            _discard(self._ready.popitem()[1])


def _start(
    number: int, cgroups: RoundCgroups | None, failed: Callable[[str], None], landlock: bool
) -> Prepared:
    cgroup: RoundCgroup | None = None
    if cgroups is not None:
        try:
            cgroup = cgroups.create(number)
        except CgroupUnavailable as exc:
            failed(str(exc))
    try:
        child = GatedChild.spawn(into=None if cgroup is None else cgroup.procs, landlock=landlock)
    except OSError:
        if cgroup is not None:
            cgroup.remove()
        raise
    return Prepared(number, child, cgroup)


def _discard(prepared: Prepared) -> None:
    prepared.child.abandon()
    if prepared.cgroup is not None:
        prepared.cgroup.remove()
