"""Round transcripts: capped at transcript_max_bytes (head and tail kept, the cut marked),
old ones pruned, and a disk that refuses them costs the transcript, never the round."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import sys

from tests.integration.conftest import Project, agent

KIB = 1024
LINE = 56  # bytes per line the flooding agent prints


def expected_output(lines: int) -> bytes:
    """What the flooding agent writes, in order (stderr and stdout share the pipe)."""
    out = b"".join(f"line {i:09d} {'x' * 40}\n".encode() for i in range(lines))
    return (
        out
        + b'{"type": "result", "is_error": false, "usage": {"input_tokens": 7, "output_tokens": 3}}\n'
    )


def test_a_flood_keeps_the_head_and_the_tail_and_marks_the_cut(project: Project) -> None:
    lines = 60_000  # about 3.3 MiB
    cap = 256 * KIB
    project.write_config(
        agent("floods.py", str(lines)), runtime={"max_rounds": 1, "transcript_max_bytes": cap}
    )
    done = project.cli("serve")
    assert done.returncode == 0, done.stderr
    output = expected_output(lines)
    kept = (project.log_dir / "rounds" / "round-000001.log").read_bytes()

    marker = re.search(
        rb"\n\[agent-runner: +(\d+) bytes of output left out here; "
        rb"transcript_max_bytes = 262144\]\n",
        kept,
    )
    assert marker is not None
    head, tail = kept[: marker.start()], kept[marker.end() :]
    left_out = int(marker[1])
    assert head == output[: cap // 4]
    assert len(head) + left_out + len(tail) == len(output)
    assert tail == output[len(output) - len(tail) :]
    assert cap // 2 <= len(tail) <= 3 * cap // 4
    assert len(kept) <= cap + len(marker[0])
    truncated = project.events("transcript_truncated")
    assert [(e["round"], e["bytes_left_out"]) for e in truncated] == [(1, left_out)]
    usage = project.events("agent_usage_recorded")
    assert [u["output_tokens"] for u in usage] == [3], "the parser still reads the tail"


def test_output_under_the_cap_is_kept_whole(project: Project) -> None:
    project.write_config(agent("floods.py", "1000"), runtime={"max_rounds": 1})
    assert project.cli("serve").returncode == 0
    kept = (project.log_dir / "rounds" / "round-000001.log").read_bytes()
    assert kept == expected_output(1000)
    assert project.events("transcript_truncated") == []


def test_only_the_newest_transcripts_are_kept(project: Project) -> None:
    rounds = project.log_dir / "rounds"
    rounds.mkdir(parents=True)
    (project.log_dir / "state.json").write_text('{"last_round_number": 10}')
    for earlier in (3, 10):  # from earlier serves: found by one scan of the folder
        (rounds / f"round-{earlier:06d}.log").write_text("earlier\n")
    (rounds / "notes.txt").write_text("not a transcript\n")
    project.write_config(
        agent("floods.py", "10"), runtime={"max_rounds": 4, "transcript_keep_rounds": 2}
    )
    assert project.cli("serve").returncode == 0
    assert [e["round"] for e in project.events("round_end")] == [11, 12, 13, 14]
    assert sorted(p.name for p in rounds.iterdir()) == [
        "notes.txt",
        "round-000013.log",
        "round-000014.log",
    ]


def test_a_disk_that_refuses_the_transcript_costs_the_transcript_not_the_round(
    project: Project,
) -> None:
    # Far more than a pipe holds: an agent whose output nobody drains would block.
    project.write_config(
        agent("floods.py", "100000"), runtime={"max_rounds": 1, "round_budget_s": 15}
    )
    limit = 200 * KIB

    def small_disk() -> None:
        # Every file serve writes is capped, as on a nearly full disk; EFBIG, not SIGXFSZ.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        [sys.executable, "-m", "agent_runner", "serve", "--config", str(project.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=small_disk,
    )
    assert done.returncode == 0, done.stderr
    failed = project.events("transcript_write_failed")
    assert [e["round"] for e in failed] == [1]
    assert "too large" in failed[0]["reason"].lower()
    exit_event = project.events("agent_exit")[0]
    assert exit_event["exit_cause"] == "clean", "the agent never blocked on its output"
    assert (project.log_dir / "rounds" / "round-000001.log").stat().st_size <= limit
