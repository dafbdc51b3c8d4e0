"""The gated child confines its agent with the ruleset it is handed, or does not run it.

serve's own children load what confining takes while they wait (tests/security/
test_agent_confinement.py); these start without that, and one gets a descriptor that is
no ruleset at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.supervisor.agent import landlock
from agent_runner.supervisor.agent.gate import Confine, GatedChild
from agent_runner.supervisor.agent.process import AgentProcess, SpawnError
from agent_runner.supervisor.agent.writepolicy import granted_rights
from tests.security.conftest import require_landlock

WRITE_BOTH = (
    "import sys\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        open(path, 'w').write('x')\n"
    "        print(path, 'ok')\n"
    "    except OSError as exc:\n"
    "        print(path, exc.errno)\n"
)


@pytest.fixture
def abi() -> int:
    require_landlock()
    return landlock.abi_version()


@pytest.fixture
def allowed(tmp_path: Path, abi: int) -> Iterator[tuple[Path, Confine]]:
    """A ruleset allowing writes beneath tmp_path/allowed only."""
    (tmp_path / "allowed").mkdir()
    ruleset = landlock.create_ruleset(landlock.write_rights(abi))
    landlock.allow_beneath(ruleset, tmp_path / "allowed", granted_rights(abi))
    yield tmp_path, Confine(ruleset, landlock.restrict_flags(abi))
    os.close(ruleset)


def run(tmp_path: Path, confine: Confine, *paths: Path) -> AgentProcess:
    agent = AgentProcess.spawn(
        [sys.executable, "-I", "-c", WRITE_BOTH, *map(str, paths)],
        cwd=tmp_path,
        env=os.environ,
        stdin_data=None,
        transcript=tmp_path / "t.log",
        child=GatedChild.spawn(landlock=False),
        confine=confine,
    )
    assert agent.wait(30)
    return agent


def test_a_child_that_did_not_load_landlock_ahead_still_confines(
    allowed: tuple[Path, Confine],
) -> None:
    tmp_path, confine = allowed
    inside, outside = tmp_path / "allowed" / "a", tmp_path / "b"
    assert run(tmp_path, confine, inside, outside).result().cause == "clean"
    assert (tmp_path / "t.log").read_text().splitlines() == [f"{inside} ok", f"{outside} 13"]
    assert inside.exists() and not outside.exists()


def test_an_agent_whose_confinement_fails_never_runs(tmp_path: Path, abi: int) -> None:
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(SpawnError, match="Landlock refused to confine it"):
            run(tmp_path, Confine(read_end, 0), tmp_path / "ran")
    finally:
        os.close(read_end)
        os.close(write_end)
    assert not (tmp_path / "ran").exists()
