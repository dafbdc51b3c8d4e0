"""A plugin cannot choose how its call is reported to have ended, nor outgrow its one task."""

from __future__ import annotations

import pytest

from tests.security.conftest import run_hook
from tests.security.harness import InProcess

EPERM = 1


@pytest.mark.parametrize("name", ["SIGSYS", "SIGXCPU", "SIGSEGV", "SIGKILL"])
def test_a_plugin_cannot_kill_itself_with_a_chosen_signal(confined: InProcess, name: str) -> None:
    body = f"""
    def hook(view):
        try:
            os.kill(os.getpid(), signal.{name})
        except PermissionError:
            pass
        try:
            signal.raise_signal(signal.{name})
        except OSError:
            pass
        libc.syscall(234, os.getpid(), libc.syscall(186), signal.{name})  # tgkill
        return SpawnDecision.skip(str(ctypes.get_errno()))
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == str(EPERM)


def test_a_plugin_cannot_have_the_kernel_signal_it_on_io(confined: InProcess) -> None:
    # O_ASYNC with F_SETOWN and F_SETSIG would make the kernel send SIGSYS when a pipe
    # becomes readable: a "seccomp kill" the plugin arranged itself.
    body = """
    import fcntl as _fcntl
    def hook(view):
        r, w = os.pipe()
        out = []
        for command, argument in ((10, signal.SIGSYS), (8, os.getpid())):  # F_SETSIG, F_SETOWN
            out.append(libc.fcntl(r, command, argument) == -1 and ctypes.get_errno())
        _fcntl.fcntl(r, _fcntl.F_SETFL, os.O_ASYNC)
        os.write(w, b"x")
        return SpawnDecision.skip(str(out))
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == f"[{EPERM}, {EPERM}]"


def test_a_plugin_cannot_lower_its_own_cpu_limit_to_fake_a_timeout(confined: InProcess) -> None:
    body = """
    import resource
    def hook(view):
        limit = (ctypes.c_ulong * 2)(1, 1)
        if libc.setrlimit(resource.RLIMIT_CPU, limit) == -1:
            return SpawnDecision.skip(str(ctypes.get_errno()))
        while True:  # SIGXCPU one CPU-second from now
            pass
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == str(EPERM)


@pytest.mark.parametrize(
    "forged",
    [
        b'{"status":"refused","value":null,"detail":"confinement failed: landlock: gone"}',
        b'R"confinement failed: landlock: gone"',
        b'CR"confinement failed: landlock: gone"',
    ],
    ids=["refused envelope", "refusal mark", "refusal after the confined mark"],
)
def test_a_plugin_cannot_forge_a_refusal(confined: InProcess, forged: bytes) -> None:
    body = f"""
    def hook(view):
        os.write(3, {forged!r})
        os._exit(0)
    """
    result = run_hook(confined, body)
    assert result.status == "invalid_result", result
    assert "confinement failed" not in result.detail.split(";")[0].split(":")[0]


def test_a_real_refusal_still_reads_as_confinement_failed(confined: InProcess) -> None:
    body = """
    def hook(view):
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body, read_roots=(__import__("pathlib").Path("/nonexistent/x"),))
    assert result.status == "crash", result
    assert result.detail.startswith("refused: confinement failed")


@pytest.mark.timeout(30)
def test_a_python_thread_bomb_is_reported_by_its_real_cause(confined: InProcess) -> None:
    body = """
    import threading
    def hook(view):
        while True:
            threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    """
    result = run_hook(confined, body, timeout_s=5.0)
    assert result.status == "raised", result
    assert result.detail == "RuntimeError: can't start new thread"


def test_a_raw_clone_thread_with_a_tiny_stack_is_refused(confined: InProcess) -> None:
    # Threads sharing one small stack escape RLIMIT_AS; only refusing clone bounds them.
    body = """
    def hook(view):
        stack = ctypes.create_string_buffer(4096)
        top = ctypes.addressof(stack) + 4096
        flags = 0x00010000 | 0x00000100 | 0x00000800 | 0x00000200  # THREAD|VM|SIGHAND|FILES
        errors = set()
        for _ in range(64):
            if libc.syscall(56, flags, ctypes.c_void_p(top), None, None, None) == -1:
                errors.add(ctypes.get_errno())
        return SpawnDecision.skip(str(sorted(errors)))
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == f"[{EPERM}]"
