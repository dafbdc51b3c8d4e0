"""peek, status, events and doctor through the real CLI: read-only and accurate."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.contracts import checks_by_name, conforming, conforming_lines
from tests.integration.conftest import Project, agent
from tests.security.conftest import REQUIRE_CONFINEMENT, host_offers_landlock, require_landlock


def test_peek_reports_the_last_round_and_writes_nothing(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 2})
    assert project.cli("serve").returncode == 0
    files = sorted(p.name for p in project.log_dir.iterdir())
    events_before = project.events()
    peek = project.cli("peek", "--json", "--events", "3")
    assert peek.returncode == 0, peek.stderr
    snap = conforming("peek --json", peek.stdout)
    assert snap["supervisor"]["state"] == "stopped"
    assert [r["round"] for r in snap["last_rounds"]] == [2, 1]
    assert snap["last_rounds"][0]["exit_cause"] == "clean"
    assert snap["supervisor"]["rounds_run"] == 2
    assert snap["plugins"]["sandbox"]["tier"] in ("full", "landlock", "seccomp", "none")
    assert [e["event"] for e in snap["events"]] == ["round_end", "max_rounds_reached", "serve_stop"]
    assert project.events() == events_before
    assert sorted(p.name for p in project.log_dir.iterdir()) == files


def test_peek_select_prints_one_value(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    assert project.cli("peek", "--select", "last_rounds.0.exit_cause").stdout == "clean\n"
    assert project.cli("peek", "--select", "last_rounds.0.round", "--json").stdout == "1\n"
    missing = project.cli("peek", "--select", "last_rounds.0.nope")
    assert missing.returncode == 2
    assert "--select last_rounds.0.nope: last_rounds.0 has no key 'nope'" in missing.stderr


def test_peek_on_a_project_that_never_ran(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"))
    snap = conforming("peek --json", project.cli("peek", "--json").stdout)
    assert snap["supervisor"]["state"] == "stopped"
    assert snap["last_rounds"] == []
    assert snap["events"] == []


def test_events_filters_by_kind_and_round(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 3})
    assert project.cli("serve").returncode == 0
    out = project.cli("events", "--kind", "agent_exit", "--round", "2", "--json").stdout
    lines = conforming_lines(out)
    assert [(e["event"], e["round"]) for e in lines] == [("agent_exit", 2)]
    recent = project.cli("events", "--since", "10m").stdout
    assert recent.count(" round_start ") == 3
    assert project.cli("events", "--since", "2999-01-01T00:00:00Z").stdout == ""
    bad = project.cli("events", "--since", "yesterday")
    assert bad.returncode == 2
    assert "use 10m, 2h, 1d or an ISO time" in bad.stderr


def test_events_tolerates_a_corrupted_log(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    log = next(project.log_dir.glob("events-*.jsonl"))
    with open(log, "ab") as handle:
        handle.write(b'\x00\xff garbage\n{"event": "round_st')
    done = project.cli("events", "--json")
    assert done.returncode == 0
    assert len(done.stdout.splitlines()) == len(project.events())
    assert project.cli("peek", "--json").returncode == 0


def test_doctor_passes_on_a_healthy_project_and_self_test_blocks_everything(
    project: Project,
) -> None:
    project.write_config(agent("exits_with.py", "0"))
    done = project.cli("doctor", "--json")
    assert done.returncode == 0, done.stdout
    doc = conforming("doctor --json", done.stdout)
    checks = checks_by_name(done.stdout)
    assert checks["config"]["status"] == "ok"
    assert checks["work tree"]["status"] == "ok"
    assert doc["ok"] is True
    # Wherever the kernel offers Landlock the sandbox must be whole, as in tests/security.
    if REQUIRE_CONFINEMENT or host_offers_landlock():
        assert checks["sandbox"]["status"] == "ok"
        assert "tier full" in checks["sandbox"]["detail"]
        assert checks["sandbox self-test"]["status"] == "ok"
        assert "NOT blocked" not in checks["sandbox self-test"]["detail"]
        assert doc["sandbox"]["tier"] == "full"
        assert doc["sandbox"]["self_test"]
        assert all(doc["sandbox"]["self_test"].values())


@pytest.mark.parametrize(
    ("breakage", "name"),
    [("missing_agent", "agent command"), ("missing_prompt", "prompt files")],
)
def test_doctor_fails_with_a_fix(project: Project, breakage: str, name: str) -> None:
    if breakage == "missing_agent":
        project.write_config(["no-such-agent-binary-xyz"])
    else:
        project.write_config(agent("exits_with.py", "0"))
        (project.work_dir / "prompts" / "main.md").unlink()
    done = project.cli("doctor")
    assert done.returncode == 1
    line = next(line for line in done.stdout.splitlines() if f"  {name}:" in line)
    assert line.startswith("FAIL")
    assert "fix:" in done.stdout


def test_doctor_flags_a_log_dir_inside_the_tree_that_git_does_not_ignore(project: Project) -> None:
    project.write_config(
        agent("exits_with.py", "0"), runtime={"log_dir": str(project.work_dir / "logs")}
    )
    done = project.cli("doctor")
    assert done.returncode == 1
    assert "is inside the work tree and git does not ignore it" in done.stdout


def test_sandbox_require_boots_only_at_the_full_tier(project: Project) -> None:
    project.write_config(
        agent("exits_with.py", "0"), plugins={"sandbox": "require"}, runtime={"max_rounds": 1}
    )
    done = project.cli("serve")
    degraded = project.events("plugin_sandbox_degraded")
    if done.returncode == 78:
        assert os.environ.get("AGENT_RUNNER_REQUIRE_CONFINEMENT") != "1", done.stderr
        assert degraded[0]["requested"] == "require"
        assert project.events("round_start") == []
    else:
        assert done.returncode == 0, done.stderr
        assert degraded == []
        assert project.events("round_start")


def test_events_follow_prints_history_then_new_events(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    argv = [sys.executable, "-m", "agent_runner", "events", "--follow", "--json"]
    argv += ["--kind", "round_end", "--config", str(project.config_path)]
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert follower.stdout is not None
    try:
        assert json.loads(follower.stdout.readline())["round"] == 1  # history
        assert project.cli("serve").returncode == 0
        assert json.loads(follower.stdout.readline())["round"] == 2  # followed
    finally:
        follower.kill()
        follower.wait()
        follower.stdout.close()


def setup_warnings(project: Project, env: dict[str, str] | None = None) -> list[str]:
    done = project.cli("doctor", "--json", env=env)
    checks = conforming("doctor --json", done.stdout)["checks"]
    return [c["detail"] for c in checks if c["name"] == "agent setup"]


def test_doctor_warns_before_gemini_stops_on_an_untrusted_folder(project: Project) -> None:
    home = project.root / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    env = {"HOME": str(home), "GEMINI_API_KEY": "x", "GOOGLE_GEMINI_BASE_URL": ""}
    project.write_config(agent("exits_with.py", "0"), agent={"parser": "gemini"})
    [warning] = setup_warnings(project, env)
    assert "exits 55" in warning
    project.write_config(agent("exits_with.py", "0", "--skip-trust"), agent={"parser": "gemini"})
    assert setup_warnings(project, env) == []


def test_doctor_warns_when_gemini_would_infer_an_auth_type_it_refuses(project: Project) -> None:
    home = project.root / "home"
    home.mkdir()
    project.write_config(
        agent("exits_with.py", "0", "--skip-trust"),
        agent={"parser": "gemini", "env": {"GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:9"}},
    )
    env = {"HOME": str(home), "GEMINI_API_KEY": "x"}
    [warning] = setup_warnings(project, env)
    assert "Invalid auth method selected" in warning
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    assert setup_warnings(project, env) == []


def test_doctor_warns_when_aiders_files_would_dirty_every_round(project: Project) -> None:
    project.write_config(agent("exits_with.py", "0"), agent={"parser": "aider"})
    [warning] = setup_warnings(project)
    assert ".aider.tags.cache.v4/" in warning
    with (project.work_dir / ".git" / "info" / "exclude").open("a") as exclude:
        exclude.write(".aider*\n")
    assert setup_warnings(project) == []


@pytest.mark.parametrize("round_cgroup", ["auto", "off"])
def test_peek_and_doctor_say_how_leftovers_are_reaped(project: Project, round_cgroup: str) -> None:
    project.write_config(agent("sleeper.py", "60"), runtime={"round_cgroup": round_cgroup})
    if round_cgroup == "auto" and os.geteuid() != 0:
        pytest.skip("only root gets a cgroup on a host without a delegated one")
    local = checks_by_name(project.cli("doctor", "--json").stdout)["reaping"]
    serve = project.start()
    try:
        project.wait_for("agent_spawn")
        snap = conforming("peek --json", project.cli("peek", "--json").stdout)
        reaping = {d["name"]: d for d in snap["defenses"]}["reaping"]
        doctor = checks_by_name(project.cli("doctor", "--json").stdout)
        text = project.cli("peek").stdout
    finally:
        serve.terminate()
        serve.wait(timeout=10)
    if round_cgroup == "auto":
        assert (reaping["value"], reaping["active"]) == ("cgroup", True)
        assert reaping["detail"].startswith("a cgroup per round under /sys/fs/cgroup")
        assert (local["status"], doctor["reaping"]["status"]) == ("ok", "ok")
        assert f"reaping     {reaping['detail']}" in text
    else:
        assert (reaping["value"], reaping["active"]) == ("fallback", True)
        assert reaping["detail"] == (
            'subreaper and process scans (no cgroup: runtime.round_cgroup is "off")'
        )
        assert (local["status"], doctor["reaping"]["status"]) == ("warn", "warn")
        assert "subreaper and process scans" in doctor["reaping"]["detail"]
        assert "no cgroup: runtime.round_cgroup is" in text
    assert doctor["reaping"]["detail"].startswith("serve uses ")


def _event_line(kind: str, number: int) -> str:
    ended = {"exit_cause": "clean", "duration_s": 1.5, "memory_peak_bytes": None, "cpu_s": None}
    fields = {"round_start": {}, "round_end": ended}[kind]
    event = {"ts": "2026-11-30T23:59:59.000Z", "event": kind, "round": number, **fields}
    return json.dumps(event) + "\n"


def test_events_follow_survives_a_new_month_a_truncated_and_a_replaced_file(
    project: Project,
) -> None:
    project.write_config(agent("exits_with.py", "0"))
    project.log_dir.mkdir()
    november = project.log_dir / "events-2026-11.jsonl"
    november.write_text(_event_line("round_end", 1))
    argv = [sys.executable, "-m", "agent_runner", "events", "--follow", "--json"]
    follower = subprocess.Popen(
        [*argv, "--config", str(project.config_path)], stdout=subprocess.PIPE, text=True
    )
    assert follower.stdout is not None

    def next_round() -> int:
        assert follower.stdout is not None
        return int(conforming_lines(follower.stdout.readline())[0]["round"])

    try:
        assert next_round() == 1
        with november.open("a") as handle:
            handle.write(_event_line("round_end", 2))
        assert next_round() == 2
        december = project.log_dir / "events-2026-12.jsonl"
        december.write_text(_event_line("round_end", 3))
        assert next_round() == 3  # the new month's file
        # Truncated, then a shorter line: the follower starts the file again.
        december.write_text(_event_line("round_start", 4))
        assert next_round() == 4
        replacement = project.log_dir / "replacement.tmp"
        replacement.write_text(_event_line("round_end", 5) + _event_line("round_end", 6))
        os.replace(replacement, december)  # a new file (inode) under the same name
        assert [next_round(), next_round()] == [5, 6]
    finally:
        follower.kill()
        follower.wait()
        follower.stdout.close()


@pytest.mark.parametrize("confine", ["workdir", "off"])
def test_peek_and_doctor_show_whether_the_agent_is_confined(project: Project, confine: str) -> None:
    if confine == "workdir":
        require_landlock()
    project.write_config(agent("sleeper.py", "60"), agent={"confine": confine})
    checks = json.loads(project.cli("doctor", "--json").stdout)["checks"]
    doctor = [c for c in checks if c["name"] == "agent confinement"]
    serve = project.start()
    try:
        spawn = project.wait_for("agent_spawn")
        current = json.loads(project.cli("peek", "--json", "--select", "round").stdout)
        text = project.cli("peek").stdout
    finally:
        serve.terminate()
        serve.wait(timeout=10)
    if confine == "workdir":
        assert current["confined"] is True and current["landlock_abi"] >= 1
        assert spawn["landlock_abi"] == current["landlock_abi"]
        assert f"confined (Landlock ABI {current['landlock_abi']})" in text
        assert [c["status"] for c in doctor[:2]] == ["ok", "ok"]
        # The boot check, then doctor's policy line and its warning: this project keeps its
        # config in the work tree, so the agent can still write it.
        assert f"writes only beneath: work tree {project.work_dir};" in doctor[1]["detail"]
        assert [c["status"] for c in doctor[2:]] == ["warn"]
        assert str(project.config_path) in doctor[2]["detail"]
    else:
        assert current["confined"] is False and current["landlock_abi"] is None
        assert ", unconfined" in text
        assert [c["status"] for c in doctor] == ["ok", "warn"]
        assert 'agent.confine = "workdir"' in doctor[1]["fix"]
