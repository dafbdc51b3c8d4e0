"""The builtin dirty handler is a pure decision from dirty_action and the exit cause."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent_runner.plugins import DirtyIntent
from agent_runner.plugins.builtin.dirty import decide
from agent_runner.supervisor.dirty import DirtyView, intent_problem

CAUSES = ["clean", "error", "timeout", "stopped", "signal:SIGKILL", "signal:SIGSEGV"]


def view(action: str | None, cause: str = "clean", round_no: int = 42) -> DirtyView:
    settings = {} if action is None else {"dirty_action": action}
    return DirtyView(round_no, ("a.txt",), "/work", cause, settings)


def test_stash_message_names_the_round_and_the_exit_cause() -> None:
    assert decide(view("stash", "timeout")) == DirtyIntent.stash("agent-runner round 42 (timeout)")


def test_commit_after_a_clean_exit_commits_everything() -> None:
    assert decide(view("commit", "clean")) == DirtyIntent.commit("agent-runner: round 42")


def test_commit_after_a_failed_exit_stashes_instead() -> None:
    assert decide(view("commit", "signal:SIGKILL")) == DirtyIntent.stash(
        "agent-runner round 42 (signal:SIGKILL)"
    )


def test_ignore_gives_a_reason() -> None:
    intent = decide(view("ignore", "error"))
    assert intent.action == "ignore"
    assert "ignore" in intent.message


def test_missing_or_unknown_action_stashes_rather_than_lose_work() -> None:
    assert decide(view(None)).action == "stash"
    assert decide(view("reset --hard")).action == "stash"


@given(
    action=st.sampled_from(["stash", "commit", "ignore", "bogus"]),
    cause=st.sampled_from(CAUSES) | st.text(max_size=30),
    round_no=st.integers(min_value=1, max_value=10**9),
)
def test_half_done_work_is_never_committed(action: str, cause: str, round_no: int) -> None:
    intent = decide(view(action, cause, round_no))
    if intent.action == "commit":
        assert cause == "clean"
        assert action == "commit"
    assert intent.paths == ()


@given(cause=st.sampled_from(CAUSES), round_no=st.integers(min_value=1, max_value=10**9))
def test_builtin_intents_always_pass_the_supervisors_checks(cause: str, round_no: int) -> None:
    for action in ("stash", "commit", "ignore"):
        assert intent_problem(decide(view(action, cause, round_no)), ("a.txt",)) is None


def test_a_handler_may_only_name_dirty_files() -> None:
    files = ("a.txt", "docs/b.md")
    assert intent_problem(DirtyIntent.commit("m", paths=["docs/b.md"]), files) is None
    assert "not among the dirty files" in str(
        intent_problem(DirtyIntent.commit("m", paths=["agent-runner.toml"]), files)
    )


def test_a_handler_message_is_one_short_line() -> None:
    assert "control" in str(intent_problem(DirtyIntent.stash("a\nb"), ()))
    assert "control" in str(intent_problem(DirtyIntent.ignore("a\x1b[2Jb"), ()))
    assert "at most" in str(intent_problem(DirtyIntent.stash("x" * 201), ()))
    assert intent_problem(DirtyIntent.stash("x" * 200), ()) is None


def test_malformed_intents_are_named() -> None:
    assert "not a DirtyIntent" in str(intent_problem({"action": "stash"}, ()))
    assert "unknown action" in str(intent_problem(DirtyIntent("drop", "m"), ()))  # type: ignore[arg-type]
    assert "takes no paths" in str(intent_problem(DirtyIntent("stash", "m", ("a",)), ("a",)))
    bad_paths = DirtyIntent("commit", "m", ["a"])  # type: ignore[arg-type]
    assert "sequence of strings" in str(intent_problem(bad_paths, ("a",)))
