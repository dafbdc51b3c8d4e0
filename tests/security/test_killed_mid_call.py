"""SIGKILL of serve while a confined hook call runs, with serve as root and as a user.

tests/integration/test_serve_killed.py kills serve at each step of a round's agent; this is
the step it leaves out, a plugin's call: the fork server and the call's child must die with
serve (nobody else would ever reap them), and the next serve boots its own sandbox.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.conftest import PluginInstalls
from tests.integration.conftest import pid_alive
from tests.pluginrun import fork_servers, hook_calls, server_children
from tests.security.conftest import Served, expect_full_tier

WAIT_S = 20.0


def configure(served: Served, stall_rounds: list[int]) -> None:
    served.project.write_config(
        ["sh", "-c", "exit 0"],
        plugins={
            "sandbox": "prefer",
            "hook_timeout_s": 60,
            "settings": {"stalling_plugin": {"rounds": stall_rounds}},
        },
    )


@pytest.mark.slow
def test_serve_killed_during_a_hook_call_takes_the_fork_server_and_the_call_along(
    served: Served, plugin_installs: PluginInstalls
) -> None:
    project = served.project
    site = plugin_installs.site(project.root / "site", "stalling_plugin")
    configure(served, [1])
    first = served.start(site)
    # Past admission (its describe calls): the call found now is round 1's spawn hook.
    project.wait_for("serve_start", timeout=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while not (servers := fork_servers(first.pid)) or not hook_calls(servers[0]):
        assert time.monotonic() < deadline, "no hook call started"
        time.sleep(0.02)
    (server,) = servers
    calls = server_children(server)
    first.send_signal(signal.SIGKILL)
    assert first.wait(timeout=WAIT_S) == -signal.SIGKILL
    deadline = time.monotonic() + WAIT_S
    while any(pid_alive(pid) for pid in (server, *calls)):
        assert time.monotonic() < deadline, "the fork server or its call outlived serve"
        time.sleep(0.02)
    assert not project.events("agent_spawn"), "the hook ran before the round's agent"

    configure(served, [])
    second = served.start(site, "--max-rounds", "1")
    assert second.wait(timeout=60) == 0
    expect_full_tier(project)
    assert [e["round"] for e in project.events("round_end")] == [1]
    assert not project.events("hook_failed")
    assert len(project.events("serve_start")) == 2
