"""No string from a plugin can carry a terminal escape, a forged line or reordered text."""

from __future__ import annotations

import json

import pytest

from agent_runner.plugins import wire
from agent_runner.plugins.parent.sandbox import CallRequest
from tests.security.conftest import run_hook
from tests.security.harness import InProcess

# One example of each class the string rule refuses, as Python source for the hook.
UNSAFE = {
    "ANSI escape (C0 ESC)": r"\x1b]0;owned\x07\x1b[2J",
    "newline (forged log line)": r"\n2026-01-01 plugin_admitted",
    "carriage return": r"\r",
    "NUL": r"\x00",
    "DEL": r"\x7f",
    "C1 CSI": r"\x9b31m",
    "line separator": r"\u2028",
    "paragraph separator": r"\u2029",
    "bidi override": r"\u202e",
    "bidi isolate": r"\u2066",
    "lone surrogate": r"\ud800",
}

RETURNS = {
    "spawn reason": ("spawn", 'SpawnDecision.skip("why {s}")'),
    "dirty message": ("dirty", 'DirtyIntent.stash("msg {s}")'),
    "dirty path": ("dirty", 'DirtyIntent.commit("m", paths=["a{s}"])'),
    "event field": ("observe", 'RoundReport(events=[("k", {{"v": "x{s}"}})])'),
    "event key": ("observe", 'RoundReport(events=[("k", {{"x{s}": 1}})])'),
    "classification": (
        "observe",
        'RoundReport(transient={{"classification": "c{s}", "reset_at": None}})',
    ),
}


@pytest.mark.parametrize(
    ("char_class", "where"),
    [
        (char_class, where)
        for char_class in sorted(UNSAFE)
        for where in sorted(RETURNS)
        # A commit message may have lines: test_a_commit_message_keeps_its_lines.
        if not (where == "dirty message" and char_class.startswith("newline"))
    ],
)
def test_a_result_string_with_an_unsafe_character_is_invalid(
    confined: InProcess, char_class: str, where: str
) -> None:
    family, returned = RETURNS[where]
    body = f"""
    def hook(view):
        return {returned.format(s=UNSAFE[char_class])}
    """
    result = run_hook(confined, body, family=family)
    assert result.status == "invalid_result", result
    assert "control or formatting character" in result.detail


def test_a_commit_message_keeps_its_lines(confined: InProcess) -> None:
    body = """
    def hook(view):
        return DirtyIntent.commit("subject\\n\\nbody\\tindented", paths=[])
    """
    result = run_hook(confined, body, family="dirty")
    assert result.status == "ok", result
    assert result.value["message"] == "subject\n\nbody\tindented"


def test_a_describe_with_a_bad_event_kind_or_hook_name_is_invalid(confined: InProcess) -> None:
    for manifest, needle in (
        ('PluginManifest(name="p", event_kinds=("Bad Kind",))', "bad event kind"),
        ('PluginManifest(name="p", event_kinds=("k\\x1b[31m",))', "control or formatting"),
        ('PluginManifest(name="p\\u202e")', "control or formatting"),
    ):
        sources = {
            "p/__init__.py": (
                f"from agent_runner.plugins import PluginManifest\nPLUGIN = {manifest}\n"
            ).encode()
        }
        result = confined.call(CallRequest("describe", sources, "p:PLUGIN", None, {}))
        assert result.status == "invalid_result", (manifest, result)
        assert needle in result.detail


def test_a_hook_name_that_is_not_an_identifier_is_invalid(confined: InProcess) -> None:
    sources = {
        "p/__init__.py": (
            b"from agent_runner.plugins import PluginManifest\n"
            b"def hook(view):\n    pass\n"
            b"hook.__name__ = 'hook\\x1b[2J'\n"
            b"PLUGIN = PluginManifest(name='p', spawn_hooks=(hook,))\n"
        )
    }
    result = confined.call(CallRequest("describe", sources, "p:PLUGIN", None, {}))
    assert result.status == "invalid_result", result
    assert "holds the control or formatting character \\x1b" in result.detail


def test_an_exception_message_and_stderr_reach_the_parent_escaped(confined: InProcess) -> None:
    body = """
    import sys
    def hook(view):
        sys.stderr.write("before\\x1b[2J\\u202eafter\\n")
        raise RuntimeError("boom\\x1b]0;owned\\x07\\n2026 fake line")
    """
    result = run_hook(confined, body)
    assert result.status == "raised", result
    assert result.detail == "RuntimeError: boom\\x1b]0;owned\\x07\\x0a2026 fake line"
    wire.check_text(result.detail, "detail")
    assert "before\\x1b[2J\\u202eafter\n" in result.stderr_tail
    wire.check_text(result.stderr_tail, "stderr", multiline=True)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-8-sig"])
def test_a_result_not_in_plain_utf_8_is_invalid(confined: InProcess, encoding: str) -> None:
    value = {"action": "skip", "defer_s": 0, "reason": "r"}
    envelope = json.dumps({"status": "ok", "value": value, "detail": ""})
    body = f"""
    def hook(view):
        os.write(3, b"C" + {envelope.encode(encoding)!r})
        os._exit(0)
    """
    result = run_hook(confined, body)
    assert result.status == "invalid_result", result
    assert "not JSON" in result.detail
