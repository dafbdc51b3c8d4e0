"""`init --preset X` then `doctor`, for every preset: what init writes passes every boot check.

The CLI itself is a stub of the same name on PATH (the real ones are not installed in CI); for
`generic` the stub carries the name of the command init writes for the operator to replace.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_runner.config import load_config
from agent_runner.presets import preset_names
from tests.contracts import checks_by_name
from tests.integration.conftest import Project, git


@pytest.mark.parametrize("preset", preset_names())
def test_init_then_doctor_passes_once_the_cli_is_installed(
    project: Project, tmp_path: Path, preset: str
) -> None:
    git(project.root, "init", "-q")
    init = project.cli("init", "--preset", preset, "--force")
    assert init.returncode == 0, init.stderr
    config = load_config(project.config_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = config.agent.command[0]
    if "/" not in program:
        stub = bin_dir / program
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "HOME": str(tmp_path / "home"),
    }
    doctor = project.cli("doctor", "--json", env=env)
    checks = checks_by_name(doctor.stdout)
    failed = {name: check["detail"] for name, check in checks.items() if check["status"] == "fail"}
    assert failed == {}
    assert doctor.returncode == 0, doctor.stderr
    assert checks["agent parser"]["detail"] == config.agent.parser
    assert checks["agent command"]["detail"].startswith(f"{program} -> ")


def test_doctor_names_the_command_generic_leaves_to_the_operator(project: Project) -> None:
    assert project.cli("init", "--preset", "generic", "--force").returncode == 0
    doctor = project.cli("doctor", "--json", env={"PATH": "/usr/bin:/bin"})
    assert doctor.returncode == 1
    command = checks_by_name(doctor.stdout)["agent command"]
    assert command["status"] == "fail"
    assert command["detail"] == "agent.command: 'my-agent' is not an executable on PATH"


def test_a_bad_pattern_stops_serve_at_boot_with_78_and_one_line(project: Project) -> None:
    project.write_config(
        ["/bin/true"], agent={"parser": "generic", "patterns": {"rate_limit": "(a+)+$"}}
    )
    serve = project.cli("serve")
    assert serve.returncode == 78
    lines = serve.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "agent.patterns.rate_limit: repeats a repetition or an alternation" in lines[0]
    doctor = project.cli("doctor", "--json")
    assert doctor.returncode == 78
    assert json.loads(doctor.stdout)["ok"] is False
