"""Every forbidden operation, tried by a real plugin in a confined child, is denied or killed."""

from __future__ import annotations

import importlib.util
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.plugins.child.forkserver import SHARED_PACKAGE_DIRS
from agent_runner.plugins.childenv import LOCALE
from tests.security import harness
from tests.security.conftest import SECRET_NAME, SECRET_VALUE, run_hook
from tests.security.harness import InProcess

EPERM_DETAIL = "[Errno 1]"
EACCES_DETAIL = "[Errno 13]"


@pytest.fixture(scope="module")
def outside_dir() -> Iterator[Path]:
    """A world-readable, world-writable directory outside every root: only Landlock can refuse."""
    path = Path(tempfile.mkdtemp(prefix="agent-runner-outside-"))
    path.chmod(0o1777)
    secret = path / "id_ed25519"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    secret.chmod(0o644)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def assert_raised(result: object, needle: str) -> None:
    assert getattr(result, "status", None) == "raised", result
    assert needle in getattr(result, "detail", ""), result


def test_probe_reports_the_full_tier(confined: InProcess) -> None:
    assert confined.report is not None
    report = confined.report.to_dict()
    assert report["tier"] == "full"
    assert report["fs"]
    assert report["seccomp"]
    assert report["unconfined_reason"] is None
    assert report["net"] is (report["landlock_abi"] >= 4)
    assert report["scope"] is (report["landlock_abi"] >= 6)


def test_self_test_reports_every_operation_blocked(confined: InProcess) -> None:
    report = confined.self_test()
    assert set(report) >= {"read_outside", "write_outside", "tcp_connect", "exec", "fork"}
    assert all(report.values()), report


def test_plugin_cannot_open_a_tcp_socket(confined: InProcess) -> None:
    body = """
    import socket
    def hook(view):
        socket.create_connection(("127.0.0.1", 22), timeout=1)
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_plugin_cannot_open_a_unix_socket(confined: InProcess) -> None:
    body = """
    import socket
    def hook(view):
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_plugin_cannot_create_a_socketpair(confined: InProcess) -> None:
    body = """
    import socket
    def hook(view):
        socket.socketpair()
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_plugin_cannot_exec_a_program(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.execv("/bin/sh", ["sh", "-c", "id > /tmp/pwned"])
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_plugin_cannot_fork(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.fork()
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_fork_bomb_stops_at_the_first_fork(confined: InProcess) -> None:
    body = """
    def hook(view):
        while True:
            os.fork()
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_plugin_cannot_start_a_thread(confined: InProcess) -> None:
    body = """
    import threading
    def hook(view):
        box = []
        worker = threading.Thread(target=lambda: box.append(42))
        worker.start(); worker.join()
        return SpawnDecision.skip(str(box))
    """
    result = run_hook(confined, body)
    assert result.status == "raised", result
    assert result.detail == "RuntimeError: can't start new thread"


def test_plugin_cannot_signal_the_supervisor(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.kill(view.parent_pid, signal.SIGTERM)
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_plugin_cannot_signal_the_fork_server(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.kill(os.getppid(), signal.SIGKILL)
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


@pytest.mark.parametrize(
    "send",
    [
        "os.kill(os.getpid(), signal.SIGUSR1)",
        "signal.raise_signal(signal.SIGUSR1)",
        "signal.pthread_kill(__import__('threading').get_ident(), signal.SIGUSR1)",
        "libc.syscall(200, os.getpid(), signal.SIGUSR1)",  # tkill
        "libc.syscall(234, os.getpid(), os.getpid(), signal.SIGUSR1)",  # tgkill
        "libc.syscall(129, os.getpid(), signal.SIGUSR1, 0)",  # rt_sigqueueinfo
        "libc.syscall(297, os.getpid(), os.getpid(), signal.SIGUSR1, 0)",  # rt_tgsigqueueinfo
        "libc.syscall(424, os.pidfd_open(os.getpid()), signal.SIGUSR1, 0, 0)",  # pidfd_send_signal
    ],
)
def test_plugin_cannot_signal_even_itself(confined: InProcess, send: str) -> None:
    body = f"""
    def hook(view):
        received = []
        signal.signal(signal.SIGUSR1, lambda *a: received.append(1))
        try:
            rc = {send}
        except OSError as exc:
            rc, err = -1, exc.errno
        else:
            err = ctypes.get_errno() if rc == -1 else 0
        return SpawnDecision.skip(f"{{rc}} {{err}} {{received}}")
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == "-1 1 []"


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("ptrace", 101),
        ("process_vm_readv", 310),
        ("process_vm_writev", 311),
        ("bpf", 321),
        ("perf_event_open", 298),
        ("keyctl", 250),
        ("add_key", 248),
        ("request_key", 249),
        ("mount", 165),
        ("umount2", 166),
        ("pivot_root", 155),
        ("move_mount", 429),
        ("open_tree", 428),
        ("fsopen", 430),
        ("fsmount", 432),
        ("unshare", 272),
        ("setns", 308),
        ("io_uring_setup", 425),
        ("userfaultfd", 323),
        ("kexec_load", 246),
        ("init_module", 175),
        ("finit_module", 313),
        ("delete_module", 176),
        ("pidfd_getfd", 438),
        ("open_by_handle_at", 304),
    ],
)
def test_escape_syscall_kills_the_child(confined: InProcess, name: str, number: int) -> None:
    body = f"""
    def hook(view):
        libc.syscall({number}, 0, 0, 0, 0, 0)
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "sandbox_kill", (name, result)
    assert result.signal == "SIGSYS"


def test_32bit_syscall_entry_kills_the_child(confined: InProcess) -> None:
    body = """
    def hook(view):
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        page = libc.mmap(None, 4096, 7, 0x22, -1, 0)  # RWX, MAP_PRIVATE|MAP_ANONYMOUS
        code = b"\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3"  # mov eax, 20 (getpid); int 0x80; ret
        ctypes.memmove(page, code, len(code))
        ctypes.CFUNCTYPE(ctypes.c_int)(page)()
        return SpawnDecision.proceed()
    """
    result = run_hook(confined, body)
    assert result.status == "sandbox_kill", result


@pytest.mark.parametrize(("number", "expected_errno"), [(435, 38), (470, 38), (1000, 38)])
def test_unknown_or_new_syscalls_fail_with_enosys(
    confined: InProcess, number: int, expected_errno: int
) -> None:
    body = f"""
    def hook(view):
        rc = libc.syscall({number}, 0, 0, 0, 0, 0)
        return SpawnDecision.skip(f"{{rc}} {{ctypes.get_errno()}}")
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == f"-1 {expected_errno}"


@pytest.mark.parametrize(
    "call",
    [
        "os.chmod(path, 0o4777)",
        "os.chown(path, 0, 0)",
        "os.utime(path, (0, 0))",
        "os.memfd_create('x')",
        "libc.syscall(424, 3, 9, 0, 0)",  # pidfd_send_signal
    ],
)
def test_metadata_changes_and_memfd_are_refused(confined: InProcess, call: str) -> None:
    body = f"""
    def hook(view):
        path = os.path.join(os.environ["TMPDIR"], "f")
        open(path, "w").close()
        if {call} == -1:
            raise PermissionError(ctypes.get_errno(), "[Errno %d]" % ctypes.get_errno())
    """
    assert_raised(run_hook(confined, body), EPERM_DETAIL)


def test_plugin_cannot_read_files_outside_its_roots(confined: InProcess, outside_dir: Path) -> None:
    body = f"""
    def hook(view):
        return SpawnDecision.skip(open({str(outside_dir / "id_ed25519")!r}).read().strip())
    """
    assert_raised(run_hook(confined, body), EACCES_DETAIL)


def test_a_read_root_makes_the_same_file_readable(confined: InProcess, outside_dir: Path) -> None:
    body = f"""
    def hook(view):
        return SpawnDecision.skip(open({str(outside_dir / "id_ed25519")!r}).read().strip())
    """
    result = run_hook(confined, body, read_roots=(outside_dir,))
    assert result.status == "ok", result
    assert "PRIVATE KEY" in result.value["reason"]


def test_plugin_cannot_list_the_root_directory_or_home(confined: InProcess) -> None:
    body = """
    def hook(view):
        os.listdir("/root/.ssh" if os.path.exists("/root/.ssh") else "/")
    """
    result = run_hook(confined, body)
    assert result.status == "raised", result
    assert EACCES_DETAIL in result.detail or "PermissionError" in result.detail


def test_plugin_cannot_write_outside_its_scratch(confined: InProcess, outside_dir: Path) -> None:
    body = f"""
    def hook(view):
        open({str(outside_dir / "planted")!r}, "w").write("x")
    """
    assert_raised(run_hook(confined, body), EACCES_DETAIL)
    assert not (outside_dir / "planted").exists()


def test_plugin_cannot_write_inside_a_read_root(confined: InProcess, outside_dir: Path) -> None:
    body = f"""
    def hook(view):
        open({str(outside_dir / "planted")!r}, "w").write("x")
    """
    assert_raised(run_hook(confined, body, read_roots=(outside_dir,)), EACCES_DETAIL)


def test_plugin_can_write_its_scratch(confined: InProcess) -> None:
    body = """
    import pathlib
    def hook(view):
        scratch = pathlib.Path(os.environ["HOME"])
        (scratch / "sub").mkdir()
        (scratch / "sub" / "f.txt").write_text("kept")
        return SpawnDecision.skip((scratch / "sub" / "f.txt").read_text())
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    assert result.value["reason"] == "kept"


def test_plugin_cannot_read_the_supervisor_environment(confined: InProcess) -> None:
    body = """
    def hook(view):
        return SpawnDecision.skip(open(f"/proc/{view.parent_pid}/environ").read())
    """
    assert_raised(run_hook(confined, body), EACCES_DETAIL)


def test_supervisor_secrets_are_not_in_the_child_environment(confined: InProcess) -> None:
    body = """
    def hook(view):
        return DirtyIntent.ignore(json.dumps(dict(os.environ)))
    """
    result = run_hook(confined, body, family="dirty")
    assert result.status == "ok", result
    env = __import__("json").loads(result.value["message"])
    assert SECRET_NAME not in env
    assert SECRET_VALUE not in result.value["message"]
    assert set(env) <= {"PATH", "TZ", "HOME", "TMPDIR", *LOCALE}
    assert env["HOME"] == env["TMPDIR"]


def test_fork_server_never_held_the_secrets(confined: InProcess) -> None:
    environ = Path(f"/proc/{confined.server_pid}/environ").read_bytes()
    assert SECRET_VALUE.encode() not in environ
    assert SECRET_NAME.encode() not in environ


def test_child_runs_as_nobody_under_root_and_as_the_user_otherwise(confined: InProcess) -> None:
    body = """
    def hook(view):
        return SpawnDecision.skip(f"{os.getresuid()} {os.getresgid()} {os.getgroups()}")
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    uid = confined.child_uid
    assert uid == (65534 if confined.mode == "root" else confined.supervisor_uid) != 0
    assert result.value["reason"] == f"{(uid,) * 3} {(uid,) * 3} []"


def test_swapped_files_and_planted_bytecode_on_disk_never_run(
    confined: InProcess, shared_dir: Path
) -> None:
    tmp_path = shared_dir
    package = tmp_path / "hostile"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('disk copy ran')\n")
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0" * 64)
    tmp_path.chmod(0o755)
    body = """
    def hook(view):
        return SpawnDecision.skip(__spec__.origin)
    """
    result = run_hook(confined, body, read_roots=(tmp_path,))
    assert result.status == "ok", result
    assert result.value["reason"] == "<plugin>/hostile/__init__.py"
    assert stat.S_ISDIR((package / "__pycache__").stat().st_mode)
    assert os.listdir(package / "__pycache__") == ["__init__.cpython-311.pyc"]


def test_plugin_cannot_import_modules_from_a_read_root(
    confined: InProcess, shared_dir: Path
) -> None:
    tmp_path = shared_dir
    (tmp_path / "evil_helper.py").write_text("VALUE = 1\n")
    tmp_path.chmod(0o755)
    body = """
    def hook(view):
        import evil_helper
    """
    result = run_hook(confined, body, read_roots=(tmp_path,))
    assert result.status == "raised", result
    assert "ModuleNotFoundError" in result.detail


def test_installed_distributions_are_unreadable_but_the_stdlib_is_not(confined: InProcess) -> None:
    click_spec, json_spec = importlib.util.find_spec("click"), importlib.util.find_spec("json")
    assert click_spec is not None and click_spec.origin is not None
    assert json_spec is not None and json_spec.origin is not None
    assert confined.child_can_read(click_spec.origin), "only Landlock may be what refuses it"
    body = f"""
    def hook(view):
        out = []
        for path in ({click_spec.origin!r}, {json_spec.origin!r}):
            try:
                open(path, "rb").close()
                out.append("read")
            except OSError as exc:
                out.append(str(exc.errno))
        return SpawnDecision.skip(" ".join(out))
    """
    result = run_hook(confined, body)
    assert result.status == "ok", result
    click, stdlib = result.value["reason"].split()
    assert click == "13"
    # Here the stdlib may sit under a 0700 home that nobody cannot traverse whatever Landlock says.
    assert stdlib == ("read" if confined.child_can_read(json_spec.origin) else "13")


def test_no_read_root_holds_installed_distributions(confined: InProcess) -> None:
    roots = confined.read_roots
    json_spec = importlib.util.find_spec("json")
    assert json_spec is not None and json_spec.origin is not None
    assert os.path.dirname(json_spec.origin) in roots
    for root in roots:
        assert os.path.basename(root) not in SHARED_PACKAGE_DIRS, root
        for shared in SHARED_PACKAGE_DIRS:
            assert not os.path.isdir(os.path.join(root, shared)), root


FORWARDED = {
    # What `SendEnv LANG LC_*` over SSH can carry: any name, any value.
    "LC_GITHUB_TOKEN": "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
    "LC_TIME": "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
    "LC_PAPER": "en_US.UTF-8",
    "LC_CTYPE": "$(curl evil)",
    "LC_MESSAGES": "de_DE.UTF-8",
    "LC_ALL": "sr_RS@latin",
    "LANG": "C.UTF-8",
}


@pytest.fixture(params=harness.MODES)
def forwarded_locale(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InProcess]:
    """A sandbox started by a supervisor whose environment came in over SSH."""
    for name, value in FORWARDED.items():
        monkeypatch.setenv(name, value)
    sandbox = harness.create(request.param, "require")
    sandbox.start()
    yield sandbox
    sandbox.close()


def test_only_posix_locale_categories_with_locale_values_reach_a_plugin(
    forwarded_locale: InProcess,
) -> None:
    body = """
    def hook(view):
        return SpawnDecision.skip(json.dumps(sorted(k for k in os.environ if k[:3] in ("LC_", "LAN"))))
    """
    result = run_hook(forwarded_locale, body)
    assert result.status == "ok", result
    assert __import__("json").loads(result.value["reason"]) == ["LANG", "LC_ALL", "LC_MESSAGES"]
    server_env = Path(f"/proc/{forwarded_locale.server_pid}/environ").read_bytes()
    assert b"ghp_" not in server_env
    assert b"LC_PAPER" not in server_env


@pytest.mark.timeout(30)
def test_a_plugin_child_is_not_dumpable(confined: InProcess) -> None:
    # Under a user's supervisor the agent runs as the plugin's uid. A task that is not
    # dumpable has its /proc files owned by root, and only CAP_SYS_PTRACE may attach to it:
    # the agent cannot rewrite what a hook returns.
    server, scratch_root = confined.server_pid, confined.scratch_root
    assert scratch_root is not None
    body = """
    def hook(view):
        open("running", "w").close()
        time.sleep(2)
        return SpawnDecision.proceed()
    """
    owners: list[int] = []

    def look() -> None:
        # Once the hook runs (its mark is in its scratch), not while the child is being set up.
        deadline = time.monotonic() + 5.0
        while not list(scratch_root.glob("*/running")) and time.monotonic() < deadline:
            time.sleep(0.01)
        (child,) = Path(f"/proc/{server}/task/{server}/children").read_text().split()
        # A task's /proc files belong to its uid while it is dumpable, to root once it is not.
        owners.append(Path(f"/proc/{child}/mem").stat().st_uid)

    looker = threading.Thread(target=look)
    looker.start()
    result = run_hook(confined, body)
    looker.join()
    assert result.status == "ok", result
    assert owners == [0]
