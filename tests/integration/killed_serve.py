"""Run `agent-runner serve` that SIGKILLs itself at one step inside a round.

Usage: python killed_serve.py STEP RECORD CONFIG. STEP is `none` or one of the steps below;
RECORD receives the pid of the agent held at its gate, where the step has one. The kill is a
real SIGKILL: everything the kernel does when serve dies happens exactly as from outside.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


def arm(step: str, record: Path) -> None:
    from agent_runner.supervisor.agent import gate
    from agent_runner.supervisor.loop import serve as serve_module

    def die(pid: int | None = None) -> None:
        if pid is not None:
            record.write_text(str(pid))
        os.kill(os.getpid(), signal.SIGKILL)

    if step == "before_spawn":
        gate.GatedChild.spawn = classmethod(lambda *_a, **_k: die())  # type: ignore[assignment, method-assign]
    elif step == "between_fork_and_exec":
        # The child exists, in its cgroup where there is one, but nothing recorded it yet.
        serve_module.Serve._on_spawn = lambda _self, _n, agent, _cg, _abi: die(agent.pid)  # type: ignore[method-assign]
    elif step == "recorded_not_released":
        gate.GatedChild.start = lambda child, *_a, **_k: die(child.pid)  # type: ignore[method-assign]
    elif step == "next_recorded_not_released":
        # Round 2: one write has ended round 1 and recorded this agent; it is not released.
        real_start = gate.GatedChild.start
        started: list[int] = []

        def start(child: gate.GatedChild, *args: Any, **kwargs: Any) -> Any:
            started.append(child.pid)
            if len(started) == 2:
                die(child.pid)
            return real_start(child, *args, **kwargs)

        gate.GatedChild.start = start  # type: ignore[method-assign]
    elif step == "during_state_write":
        real = os.replace

        def replace(src: Any, dst: Any) -> None:
            if str(dst).endswith("state.json"):
                written = json.loads(Path(src).read_text())
                if written["supervisor"]["phase"] == "running":
                    die(written["round"]["pid"])  # written and synced, not yet renamed
            real(src, dst)

        os.replace = replace  # type: ignore[assignment]
    elif step == "children_fail_after_round_1":
        # Round 1's child starts; no other does (fork fails), and serve dies as round 3 begins.
        from agent_runner.supervisor.loop import round as round_module

        real_spawn = gate.GatedChild.spawn
        spawned: list[int] = []

        def spawn(cls: Any, *args: Any, **kwargs: Any) -> Any:
            spawned.append(1)
            if len(spawned) > 1:
                raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            return real_spawn(*args, **kwargs)

        gate.GatedChild.spawn = classmethod(spawn)  # type: ignore[assignment, method-assign]
        real_run = round_module.RoundRunner.run
        runs: list[int] = []

        def run(runner: Any, number: int, *args: Any) -> Any:
            runs.append(number)
            if len(runs) == 3:
                die()
            return real_run(runner, number, *args)

        round_module.RoundRunner.run = run  # type: ignore[method-assign]
    elif step != "none":
        raise SystemExit(f"unknown step {step!r}")


if __name__ == "__main__":
    step, record, config = sys.argv[1:4]
    arm(step, Path(record))
    from agent_runner.cli import run

    sys.exit(run(["serve", "--config", config]))
