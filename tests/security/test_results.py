"""Forged, malformed and out-of-range results are failed calls; good ones come back exactly."""

from __future__ import annotations

import pytest

from agent_runner.plugins.parent.sandbox import CallRequest
from tests.security.conftest import run_hook
from tests.security.harness import InProcess


def forged(raw: str) -> str:
    """A hook that writes `raw` straight onto the result descriptor and exits."""
    return f"""
    def hook(view):
        os.write(3, {raw.encode()!r})
        os._exit(0)
    """


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (
            '{"status":"ok","value":{"action":"proceed","defer_s":0,"reason":"","x":1},"detail":""}',
            "extra",
        ),
        (
            '{"status":"ok","value":{"action":"defer","defer_s":"5","reason":""},"detail":""}',
            "number",
        ),
        (
            '{"status":"ok","value":{"action":"defer","defer_s":NaN,"reason":""},"detail":""}',
            "non-finite",
        ),
        (
            '{"status":"ok","value":{"action":"defer","defer_s":Infinity,"reason":""},"detail":""}',
            "non-finite",
        ),
        (
            '{"status":"ok","value":{"action":"defer","defer_s":1e400,"reason":""},"detail":""}',
            "range",
        ),
        (
            '{"status":"ok","value":{"action":"defer","defer_s":'
            + "1"
            + "0" * 400
            + ',"reason":""},"detail":""}',
            "too large",
        ),
        (
            '{"status":"ok","value":{"action":"defer","defer_s":-1,"reason":""},"detail":""}',
            "within",
        ),
        (
            '{"status":"ok","value":{"action":"launch","defer_s":0,"reason":""},"detail":""}',
            "unknown spawn action",
        ),
        (
            '{"status":"ok","value":{"action":"skip","defer_s":0,"reason":'
            + '"'
            + "r" * 501
            + '"'
            + '},"detail":""}',
            "at most 500",
        ),
        (
            '{"status":"ok","value":{"action":"proceed","defer_s":true,"reason":""},"detail":""}',
            "number",
        ),
        (
            '{"status":"ok","value":{"action":"proceed","defer_s":0,"reason":""},"detail":"","more":1}',
            "extra",
        ),
        ('{"status":"pwned","value":null,"detail":""}', "unknown status"),
        ("[1, 2, 3]", "must be an object"),
        ("garbage", "not JSON"),
        (
            '{"status":"ok","value":{"action":"proceed","defer_s":0,"reason":"","action":"skip"},'
            '"detail":""}',
            "duplicate key",
        ),
        (
            '{"status":"raised","value":null,"detail":"","status":"ok"}',
            "duplicate key",
        ),
    ],
)
def test_forged_spawn_results_are_invalid(confined: InProcess, raw: str, why: str) -> None:
    result = run_hook(confined, forged(raw))
    assert result.status == "invalid_result", result
    assert why in result.detail
    assert result.value is None


def test_result_over_64_kib_is_invalid(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.write(3, b" " * (70 * 1024))
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "invalid_result", result
    assert "larger than" in result.detail


def test_garbage_before_the_real_result_is_invalid(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.write(3, b"garbage")
        return SpawnDecision.proceed()
    """
    assert run_hook(confined, body).status == "invalid_result"


@pytest.mark.parametrize(
    ("family", "returned"),
    [
        ("spawn", '"proceed"'),
        ("spawn", "None"),
        ("spawn", "DirtyIntent.ignore('x')"),
        ("spawn", "SpawnDecision.defer(10**9)"),
        ("spawn", "SpawnDecision.defer(float('nan'))"),
        ("spawn", "SpawnDecision('defer', 10**400, '')"),
        ("dirty", "SpawnDecision.proceed()"),
        ("dirty", "DirtyIntent.commit('m', paths=[1, 2])"),
        ("dirty", "DirtyIntent.stash('m' * 5000)"),
        ("observe", "RoundReport(events=[('Bad Kind!', {})])"),
        ("observe", "RoundReport(events=[('k', {'n': float('inf')})])"),
        ("observe", "RoundReport(events=[('k', {'n': 10**400})])"),
        ("observe", "RoundReport(events=[('k', {})] * 101)"),
        ("observe", "RoundReport(transient={'classification': 'x'})"),
        ("observe", "{'events': [], 'transient': None}"),
    ],
)
def test_wrong_return_types_and_values_are_invalid(
    confined: InProcess, family: str, returned: str
) -> None:
    body = f"""
    def hook(view):
        return {returned}
    """
    result = run_hook(confined, body, family=family)
    assert result.status == "invalid_result", result


def test_hook_exception_is_raised_with_its_message(confined: InProcess) -> None:
    body = """
    def hook(view):
        raise ValueError("no office today")
    """
    result = run_hook(confined, body)
    assert result.status == "raised"
    assert result.detail == "ValueError: no office today"
    assert "Traceback" in result.stderr_tail


def test_import_time_payload_failure_is_raised(confined: InProcess) -> None:
    body = """
    open("/etc/shadow").read()
    def hook(view):
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "raised", result
    assert "PermissionError" in result.detail


def test_sys_exit_in_a_hook_is_raised(confined: InProcess) -> None:
    body = """
    import sys
    def hook(view):
        sys.exit(0)
    """
    assert run_hook(confined, body).status == "raised"


def test_view_is_read_only_attribute_access(confined: InProcess) -> None:
    body = """
    def hook(view):
        try:
            view.round = 99
        except AttributeError:
            pass
        return SpawnDecision.defer(view.round * 10, reason=view.settings["why"])
    """
    result = run_hook(confined, body, view={"round": 7, "settings": {"why": "lunch"}})
    assert result.status == "ok", result
    assert result.value == {"action": "defer", "defer_s": 70.0, "reason": "lunch"}


def test_good_results_of_every_family_come_back_exactly(confined: InProcess) -> None:
    dirty = """
    def hook(view):
        return DirtyIntent.commit("docs", paths=[f for f in view.files if f.startswith("docs/")])
    """
    result = run_hook(confined, dirty, family="dirty", view={"files": ["docs/a.md", "src/b.py"]})
    assert result.status == "ok", result
    assert result.value == {"action": "commit", "message": "docs", "paths": ["docs/a.md"]}
    observe = """
    def hook(view):
        return RoundReport(events=[("tool_calls", {"count": view.transcript_tail.count("x")})],
                           transient={"classification": "rate_limit_account", "reset_at": 1.5e9})
    """
    result = run_hook(confined, observe, family="observe", view={"transcript_tail": "xx"})
    assert result.status == "ok", result
    assert result.value == {
        "events": [["tool_calls", {"count": 2}]],
        "transient": {"classification": "rate_limit_account", "reset_at": 1.5e9},
    }
    none = """
    def hook(view):
        return None
    """
    result = run_hook(confined, none, family="observe")
    assert result.value == {"events": [], "transient": None}


def test_describe_returns_hook_names_not_objects(confined: InProcess) -> None:
    body = """
    def hook(view):
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body, family="describe")
    assert result.status == "ok", result
    assert result.value == {
        "name": "hostile",
        "spawn_hooks": ["hook"],
        "dirty_handlers": ["hook"],
        "round_observers": ["hook"],
        "event_kinds": [],
    }


def test_describe_of_a_fake_manifest_is_invalid(confined: InProcess) -> None:
    fake = {"fake/__init__.py": b"class PLUGIN:\n    name = 'x'\n"}
    result = confined.call(CallRequest("describe", fake, "fake:PLUGIN", None, {}))
    assert result.status == "invalid_result", result
    assert "PluginManifest" in result.detail


def test_multi_module_plugin_imports_from_its_verified_sources(confined: InProcess) -> None:
    sources = {
        "multi/__init__.py": (
            b"from agent_runner.plugins import PluginManifest\n"
            b"from .hooks import decide\n"
            b"PLUGIN = PluginManifest(name='multi', spawn_hooks=(decide,))\n"
        ),
        "multi/hooks.py": (
            b"from agent_runner.plugins import SpawnDecision\n"
            b"from multi.util import reason\n"
            b"def decide(view):\n"
            b"    return SpawnDecision.skip(reason())\n"
        ),
        "multi/util.py": b"def reason():\n    return 'from util'\n",
    }
    request = CallRequest("spawn", sources, "multi:PLUGIN", "decide", {"round": 1})
    result = confined.call(request)
    assert result.status == "ok", result
    assert result.value["reason"] == "from util"


def test_large_sources_and_views_are_delivered_whole(confined: InProcess) -> None:
    filler = b"# " + b"x" * 998 + b"\n"
    body = b"""
from agent_runner.plugins import PluginManifest, SpawnDecision
def hook(view):
    return SpawnDecision.skip(str(len(view.transcript_tail)))
PLUGIN = PluginManifest(name="big", spawn_hooks=(hook,))
"""
    sources = {"big/__init__.py": filler * 2048 + body}
    view = {"transcript_tail": "y" * 3_000_000}
    result = confined.call(CallRequest("spawn", sources, "big:PLUGIN", "hook", view))
    assert result.status == "ok", result
    assert result.value["reason"] == "3000000"


def test_a_missing_hook_name_is_raised(confined: InProcess) -> None:
    body = """
    def hook(view):
        return SpawnDecision.proceed()
    """
    from tests.security.conftest import plugin_sources

    request = CallRequest("spawn", plugin_sources(body), "hostile:PLUGIN", "absent", {})
    result = confined.call(request)
    assert result.status == "raised", result
    assert "no spawn hook named 'absent'" in result.detail


def test_an_unencodable_exception_message_is_reported_encodable(confined: InProcess) -> None:
    body = r"""
    def hook(view):
        raise RuntimeError("\ud800 boom")
    """
    result = run_hook(confined, body)
    assert result.status == "raised", result
    assert "boom" in result.detail
    result.detail.encode("utf-8")
    result.stderr_tail.encode("utf-8")


@pytest.mark.parametrize("ending", ["ctypes.string_at(0)", "os._exit(1)"])
def test_memory_error_text_on_stderr_is_not_an_oom(confined: InProcess, ending: str) -> None:
    body = f"""
    def hook(view):
        os.write(2, b"MemoryError\\nCannot allocate memory\\n")
        {ending}
    """
    result = run_hook(confined, body)
    assert result.status == "crash", result
