"""Exit codes through the real CLI at the points where a wrong one used to slip out: a failed
cleanup, a refusal before state exists, a signal during boot, an error at any boot step.
The systemd unit's RestartPreventExitStatus trusts these (SPEC §10)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agent_runner import cli
from agent_runner.errors import ConfinementUnavailable
from agent_runner.events import iter_events
from agent_runner.supervisor.boot.instance import InstanceLock
from agent_runner.supervisor.loop import serve as serve_module
from tests.integration.conftest import REPO, Project, agent
from tests.integration.unprivileged import UNUSED_UID, chown_tree, owned_dir
from tests.unprivileged import command

# Runs the CLI with Landlock's system calls failing ENOSYS, as on a kernel built without it.
WITHOUT_LANDLOCK = textwrap.dedent(
    """
    import errno, os, sys
    import pyseccomp
    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for number in (444, 445, 446):  # landlock_create_ruleset, _add_rule, _restrict_self
        rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), number)
    rules.load()
    os.execv(sys.executable, [sys.executable, "-m", "agent_runner", *sys.argv[1:]])
    """
)
# Runs the CLI with SIGINT already pending (blocked across the exec) when it starts.
SIGINT_PENDING = textwrap.dedent(
    """
    import os, signal, sys
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    os.kill(os.getpid(), signal.SIGINT)
    os.execv(sys.executable, [sys.executable, "-m", "agent_runner", *sys.argv[1:]])
    """
)


def run_wrapped(project: Project, wrapper: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", wrapper, *args, "--config", str(project.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=project.root,
    )


def test_a_breaker_exits_69_even_when_cleanup_fails_on_a_read_only_log_dir() -> None:
    with owned_dir(UNUSED_UID) as root:
        work = root / "work"
        (work / "prompts").mkdir(parents=True)
        (work / "prompts" / "main.md").write_text("go\n")
        config = work / "agent-runner.toml"
        config.write_text(
            textwrap.dedent(
                f"""
                schema_version = 1
                [agent]
                command = ["sh", "-c", "chmod 500 \\"$AGENT_RUNNER_LOG_DIR\\"; exit 3"]
                parser = "none"
                [runtime]
                log_dir = "{root / "logs"}"
                restart_delay_s = 0
                [breakers]
                crash_loop_rounds = 1
                """
            )
        )
        chown_tree(root, UNUSED_UID)
        done = subprocess.run(
            command("agent_runner", "serve", "--config", str(config), uid=UNUSED_UID),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert (root / "logs" / "serve.pid").exists(), "the cleanup really failed"
        events = [e["event"] for e in iter_events(root / "logs")]
    assert done.returncode == 69, done.stderr
    assert "crash_loop" in events
    assert "cannot remove" in done.stderr and "serve.pid" in done.stderr


def test_require_on_a_kernel_without_landlock_exits_78_with_one_line(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), plugins={"sandbox": "require"})
    done = run_wrapped(project, WITHOUT_LANDLOCK, "serve")
    assert done.returncode == 78, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith('agent-runner: sandbox = "require" but this host only achieves')
    assert "KeyError" not in done.stderr and "Traceback" not in done.stderr
    assert "round_start" not in [e["event"] for e in iter_events(project.log_dir)]
    with InstanceLock(project.log_dir, project.work_dir):
        pass  # released


def test_a_stop_signal_pending_at_start_is_a_clean_stop_with_0(project: Project) -> None:
    project.write_config(agent("sleeper.py", "60"))
    done = run_wrapped(project, SIGINT_PENDING, "serve")
    assert done.returncode == 0, done.stderr
    kinds = [e["event"] for e in iter_events(project.log_dir)]
    assert "round_start" not in kinds
    stop = [e for e in iter_events(project.log_dir) if e["event"] == "serve_stop"]
    assert [e["reason"] for e in stop] == ["stopped (SIGINT)"]


@pytest.mark.parametrize("delay_s", [0.2, 0.4, 0.8, 1.5])
def test_sigint_at_any_moment_of_boot_is_a_stop_or_the_signal_never_a_failure(
    project: Project, delay_s: float
) -> None:
    project.write_config(agent("sleeper.py", "60"))
    serve = subprocess.Popen(
        [sys.executable, "-m", "agent_runner", "serve", "--config", str(project.config_path)],
        cwd=project.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay_s)
    serve.send_signal(signal.SIGINT)
    _, stderr = serve.communicate(timeout=30)
    # A clean stop once serve's handlers are in; before them, death by the signal itself.
    assert serve.returncode in (0, -signal.SIGINT), stderr
    assert "Traceback" not in stderr and "aborted" not in stderr
    kinds = [e["event"] for e in iter_events(project.log_dir)] if project.log_dir.is_dir() else []
    if serve.returncode == 0:
        assert [
            e["reason"] for e in iter_events(project.log_dir) if e["event"] == "serve_stop"
        ] == ["stopped (SIGINT)"]
    else:
        # Serve's handlers are in before its first event: once it has spoken, it stops cleanly.
        assert "serve_start" not in kinds, kinds


def test_ctrl_c_on_a_following_command_ends_it_by_the_signal(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    assert project.cli("serve", "--once").returncode == 0
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_runner",
            "events",
            "--follow",
            "--config",
            f"{project.config_path}",
        ],
        cwd=project.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    assert follow.stdout.readline()  # following now
    follow.send_signal(signal.SIGINT)
    _, stderr = follow.communicate(timeout=10)
    assert follow.returncode == -signal.SIGINT  # what a shell reports as 130
    assert stderr == ""


def test_ctrl_c_inside_a_host_program_is_130_not_a_failure(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write_config(agent("exits_with.py", "0"))

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("agent_runner.config.load_config", interrupted)
    assert cli.run(["peek", "--config", str(project.config_path)]) == 130
    assert capsys.readouterr().err.strip() == "agent-runner: interrupted"


BOOT_STEPS = ["become_subreaper", "locate", "recover_state", "reap_previous_serve", "admit_plugins"]


@pytest.mark.parametrize("step", BOOT_STEPS)
def test_an_internal_error_at_any_boot_step_exits_1_and_releases_everything(
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    step: str,
) -> None:
    project.write_config(agent("exits_with.py", "0"))

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError(f"{step} broke")

    monkeypatch.setattr(serve_module, step, broken)
    assert cli.run(["serve", "--config", str(project.config_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"agent-runner: internal error: RuntimeError: {step} broke")
    assert all("KeyError" not in line for line in err)
    stops = [e for e in iter_events(project.log_dir) if e["event"] == "serve_stop"]
    assert [e["reason"] for e in stops] == [f"internal error: RuntimeError: {step} broke"]
    with InstanceLock(project.log_dir, project.work_dir):
        pass  # the lock was released
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_refusal_at_boot_keeps_its_own_exit_code(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write_config(agent("exits_with.py", "0"))

    def refused(*_args: object, **_kwargs: object) -> None:
        raise ConfinementUnavailable("no confinement here")

    monkeypatch.setattr(serve_module, "admit_plugins", refused)
    assert cli.run(["serve", "--config", str(project.config_path)]) == 78
    assert capsys.readouterr().err.splitlines()[-1] == "agent-runner: no confinement here"
    with InstanceLock(project.log_dir, project.work_dir):
        pass


def test_confine_workdir_on_a_kernel_without_landlock_exits_78_with_one_line(
    project: Project,
) -> None:
    project.write_config(agent("exits_with.py", "0"), agent={"confine": "workdir"})
    done = run_wrapped(project, WITHOUT_LANDLOCK, "serve")
    assert done.returncode == 78, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("agent-runner: ") and 'agent.confine: "workdir" but' in last
    assert "Traceback" not in done.stderr
    kinds = [e["event"] for e in iter_events(project.log_dir)]
    assert "config_broken" in kinds and "round_start" not in kinds


def test_confine_if_available_on_a_kernel_without_landlock_runs_unconfined_and_says_so(
    project: Project,
) -> None:
    project.write_config(agent("exits_with.py", "0"), agent={"confine": "workdir-if-available"})
    done = run_wrapped(project, WITHOUT_LANDLOCK, "serve", "--once")
    assert done.returncode == 0, done.stderr
    events = list(iter_events(project.log_dir))
    (warning,) = [e for e in events if e["event"] == "agent_confinement_unavailable"]
    assert warning["requested"] == "workdir-if-available" and "Landlock" in warning["reason"]
    (spawn,) = [e for e in events if e["event"] == "agent_spawn"]
    assert spawn["confined"] is False and spawn["landlock_abi"] is None
    assert [e["exit_cause"] for e in events if e["event"] == "agent_exit"] == ["clean"]
