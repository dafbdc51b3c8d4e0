"""doctor and serve run one list of boot checks: for each way to break each check, serve exits
78 with doctor's words, printed once, and doctor fails that check alone. As root and as an
ordinary user (the `systemctl --user` operator)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import tomli_w

from agent_runner.supervisor.boot.checks import BOOT_CHECKS, BootCheck
from tests import unprivileged
from tests.contracts import checks_by_name
from tests.integration.conftest import Project, agent, create_project, stop_children

Mode = Literal["root", "user"]


@dataclass
class Operator:
    """A project, and the CLI run as root or as an unused uid that owns the project."""

    project: Project
    mode: Mode
    uid: int

    def write_config(self, command: list[str], **tables: dict[str, object]) -> None:
        self.project.write_config(command, **tables)
        self.own(self.project.config_path)

    def edit_config(self, **tables: dict[str, object]) -> None:
        document = tomllib.loads(self.project.config_path.read_text())
        for name, values in tables.items():
            document.setdefault(name, {}).update(values)
        self.project.config_path.write_text(tomli_w.dumps(document))

    def cli(self, *args: str, module: str = "agent_runner") -> subprocess.CompletedProcess[str]:
        argv = [module, *args, "--config", str(self.project.config_path)]
        if self.mode == "root":
            command = [sys.executable, "-m", *argv]
        else:
            command = unprivileged.command(*argv, uid=self.uid)
        return subprocess.run(
            command, capture_output=True, text=True, timeout=120, cwd=unprivileged.REPO
        )

    def own(self, *paths: Path) -> None:
        if self.mode == "user":
            for path in paths:
                for entry in [path, *path.rglob("*")]:
                    os.chown(entry, self.uid, self.uid, follow_symlinks=False)

    def script(self, name: str, text: str, mode: int = 0o755) -> None:
        path = self.project.work_dir / name
        path.write_text(text)
        path.chmod(mode)
        self.own(path)


@contextmanager
def operated(mode: Mode) -> Iterator[Operator]:
    """A fresh project in a world-traversable folder, owned by the operator of `mode`."""
    root = Path(tempfile.mkdtemp(prefix="agent-runner-boot-"))
    root.chmod(0o755)
    found = Operator(create_project(root), mode, 0 if mode == "root" else unprivileged.unused_uid())
    found.own(root)
    try:
        yield found
    finally:
        stop_children(found.project)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["root", "user"])
def operator(request: pytest.FixtureRequest) -> Iterator[Operator]:
    with operated(request.param) as found:
        yield found


Breakage = Callable[[Operator], None]


def _no_work_dir(op: Operator) -> None:
    op.edit_config(runtime={"work_dir": "no-such-folder"})


def _not_on_path(op: Operator) -> None:
    op.edit_config(agent={"command": ["no-such-agent-xyz", "-p"]})


def _relative_missing(op: Operator) -> None:
    op.edit_config(agent={"command": ["./agent.sh"]})


def _relative_not_executable(op: Operator) -> None:
    op.script("agent.sh", "#!/bin/sh\nexit 0\n", mode=0o644)
    op.edit_config(agent={"command": ["./agent.sh"]})


def _bad_shebang(op: Operator) -> None:
    op.script("agent.sh", "#!/no/such/interpreter\nexit 0\n")
    op.edit_config(agent={"command": ["./agent.sh"]})


def _env_shebang_to_nothing(op: Operator) -> None:
    op.script("agent.sh", "#!/usr/bin/env no-such-interpreter-xyz\nexit 0\n")
    op.edit_config(agent={"command": ["./agent.sh"]})


def _unknown_parser(op: Operator) -> None:
    op.edit_config(agent={"parser": "nope"})


def _log_dir_under_a_file(op: Operator) -> None:
    blocker = op.project.root / "a-file"
    blocker.write_text("")
    op.own(blocker)
    op.edit_config(runtime={"log_dir": str(blocker / "logs")})


def _log_dir_not_writable(op: Operator) -> None:
    locked = op.project.root / "locked"
    locked.mkdir(mode=0o555)  # root's: the operator may not create anything in it
    op.edit_config(runtime={"log_dir": str(locked / "logs")})


def _log_dir_tracked_by_git(op: Operator) -> None:
    op.edit_config(runtime={"log_dir": str(op.project.work_dir / "logs")})


def _prompt_missing(op: Operator) -> None:
    (op.project.work_dir / "prompts" / "main.md").unlink()


def _prompt_empty(op: Operator) -> None:
    (op.project.work_dir / "prompts" / "main.md").write_text("  \n")


def _notify_not_on_path(op: Operator) -> None:
    op.edit_config(notify={"command": ["no-such-notifier-xyz"], "on": ["round_end"]})


def _notify_unknown_kind(op: Operator) -> None:
    op.edit_config(notify={"command": ["true"], "on": ["round_edn"]})


def _notify_on_its_own_failure(op: Operator) -> None:
    op.edit_config(notify={"command": ["true"], "on": ["notify_failed"]})


def _name(breakage: Breakage | None) -> str:
    return "MISSING" if breakage is None else breakage.__name__.strip("_")


# Each boot check, by name, and every way of breaking it the tests know. A check added to
# BOOT_CHECKS without one here fails test_every_boot_check_serve_stops_on_doctor_fails_too.
BREAKAGES: dict[str, list[tuple[Breakage | None, tuple[Mode, ...]]]] = {
    "work tree": [(_no_work_dir, ("root", "user"))],
    "agent command": [
        (_not_on_path, ("root", "user")),
        (_relative_missing, ("root", "user")),
        (_relative_not_executable, ("root", "user")),
        (_bad_shebang, ("root", "user")),
        (_env_shebang_to_nothing, ("root", "user")),
    ],
    "agent parser": [(_unknown_parser, ("root", "user"))],
    # Needs a kernel without Landlock: test_confine_workdir_without_landlock_fails_doctor_too.
    "agent confinement": [],
    "log_dir": [
        (_log_dir_under_a_file, ("root", "user")),
        (_log_dir_not_writable, ("user",)),  # root writes anywhere
        (_log_dir_tracked_by_git, ("root", "user")),
    ],
    "prompt files": [(_prompt_missing, ("root", "user")), (_prompt_empty, ("root", "user"))],
    "notify": [
        (_notify_not_on_path, ("root", "user")),
        (_notify_unknown_kind, ("root",)),
        (_notify_on_its_own_failure, ("root",)),
    ],
}
CASES = [
    pytest.param(check, breakage, mode, id=f"{check.name}-{_name(breakage)}-{mode}")
    for check in BOOT_CHECKS
    for breakage, modes in BREAKAGES.get(check.name, [(None, ("root",))])
    for mode in modes
]


@pytest.mark.parametrize(("check", "breakage", "mode"), CASES)
def test_every_boot_check_serve_stops_on_doctor_fails_too(
    check: BootCheck, breakage: Breakage | None, mode: Mode
) -> None:
    if breakage is None:
        pytest.fail(f"boot check {check.name!r} has no breakage in BREAKAGES: add one")
    with operated(mode) as operator:
        operator.write_config(agent("exits_with.py", "0"))
        breakage(operator)
        assert_agree(operator, check)


def assert_agree(operator: Operator, check: BootCheck) -> None:
    doctor = operator.cli("doctor", "--json")
    assert doctor.returncode == 1, doctor.stdout
    failures = {n: c for n, c in checks_by_name(doctor.stdout).items() if c["status"] == "fail"}
    assert list(failures) == [check.name]
    assert failures[check.name]["fix"] == check.fix
    serve = operator.cli("serve", "--once")
    assert serve.returncode == 78
    # serve's one line: the config file, then doctor's very words (which name the key).
    config = operator.project.config_path
    assert serve.stderr == f"agent-runner: {config}: {failures[check.name]['detail']}\n"
    assert serve.stdout == ""


def test_a_relative_agent_command_runs_from_the_work_tree(operator: Operator) -> None:
    operator.write_config(["./agent.sh"], runtime={"max_rounds": 1})
    operator.script("agent.sh", '#!/bin/sh\necho ran in "$PWD"\n')
    checks = checks_by_name(operator.cli("doctor", "--json").stdout)
    assert checks["agent command"]["status"] == "ok"
    assert checks["agent command"]["detail"] == (
        f"./agent.sh -> {operator.project.work_dir / 'agent.sh'}"
    )
    serve = operator.cli("serve")
    assert serve.returncode == 0, serve.stderr
    transcript = operator.project.log_dir / "rounds" / "round-000001.log"
    assert transcript.read_text() == f"ran in {operator.project.work_dir}\n"


def test_the_messages_say_what_is_wrong_with_the_agent_program(operator: Operator) -> None:
    operator.write_config(agent("exits_with.py", "0"))
    expected = {
        _not_on_path: "'no-such-agent-xyz' is not an executable on PATH",
        _relative_missing: f"'./agent.sh' (in work_dir: {operator.project.work_dir}/agent.sh)"
        " does not exist",
        _bad_shebang: "its #! interpreter /no/such/interpreter does not exist or is not executable",
        _env_shebang_to_nothing: "its #! line runs 'no-such-interpreter-xyz' through env, and "
        "it is not on PATH",
    }
    for breakage, words in expected.items():
        breakage(operator)
        detail = checks_by_name(operator.cli("doctor", "--json").stdout)["agent command"]
        assert words in detail["detail"], breakage.__name__
        assert detail["detail"].startswith("agent.command: ")


def test_a_config_error_at_boot_is_printed_once_and_evented(project: Project) -> None:
    project.write_config(["no-such-agent-xyz"])
    done = project.cli("serve")
    assert done.returncode == 78
    assert done.stderr.count("\n") == 1
    [broken] = project.events("config_broken")
    assert done.stderr == f"agent-runner: {broken['reason']}\n"


def test_a_required_sandbox_the_host_cannot_give_fails_doctor_with_serves_words(
    operator: Operator,
) -> None:
    operator.write_config(agent("exits_with.py", "0"), plugins={"sandbox": "require"})
    doctor = operator.cli("doctor", "--json", module="tests.no_seccomp")
    assert doctor.returncode == 1, doctor.stdout
    failures = {n: c for n, c in checks_by_name(doctor.stdout).items() if c["status"] == "fail"}
    assert list(failures) == ["sandbox"]
    assert "only achieves tier 'landlock'" in failures["sandbox"]["detail"]
    serve = operator.cli("serve", "--once", module="tests.no_seccomp")
    assert serve.returncode == 78
    assert serve.stderr.splitlines()[-1] == f"agent-runner: {failures['sandbox']['detail']}"
    assert operator.project.events("round_start") == []


def test_confine_workdir_without_landlock_fails_doctor_too(operator: Operator) -> None:
    operator.write_config(agent("exits_with.py", "0"), agent={"confine": "workdir"})
    doctor = operator.cli("doctor", "--json", module="tests.no_landlock")
    assert doctor.returncode == 1, doctor.stdout
    failures = {n: c for n, c in checks_by_name(doctor.stdout).items() if c["status"] == "fail"}
    # The plugin sandbox's self-test fails there too; serve stops at the boot check first.
    assert list(failures) == ["agent confinement", "sandbox self-test"]
    detail = failures["agent confinement"]["detail"]
    assert detail.startswith('agent.confine: "workdir" but this kernel offers no Landlock')
    serve = operator.cli("serve", "--once", module="tests.no_landlock")
    assert serve.returncode == 78
    config = operator.project.config_path
    assert serve.stderr == f"agent-runner: {config}: {detail}\n"
    assert operator.project.events("round_start") == []
