"""`status --json`, `doctor --json` and `events --follow` on a project that has run: medians.

status reads state.json like peek; doctor also probes and self-tests the sandbox, which is
most of its time. The follower's line is how often it woke up while nothing happened (it
waits on inotify, so an idle minute costs a few wake-ups, not one every half second).
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench_peek import CLI, median_ms, served_project

IDLE_S = 10.0


def wakeups(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise RuntimeError("no voluntary_ctxt_switches in /proc")


def idle_follow_wakeups(config: Path) -> int:
    argv = [str(CLI), "events", "--follow", "--config", str(config)]
    follower = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        time.sleep(2.0)  # past start-up and the history
        before = wakeups(follower.pid)
        time.sleep(IDLE_S)
        return wakeups(follower.pid) - before
    finally:
        follower.kill()
        follower.wait()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        config = served_project(Path(tmp))
        cfg = ["--config", str(config)]
        status = median_ms([str(CLI), "status", "--json", *cfg], codes=(3,))
        print(f"status --json (not running): median {status:.1f} ms")
        doctor = median_ms([str(CLI), "doctor", "--json", *cfg])
        print(f"doctor --json (sandbox probe and self-test): median {doctor:.1f} ms")
        woke = statistics.median(idle_follow_wakeups(config) for _ in range(3))
        print(f"events --follow, idle: {woke:.0f} wake-ups in {IDLE_S:.0f} s (median of 3)")
