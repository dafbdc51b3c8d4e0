"""Nothing a call leaves in its scratch outlives it, and removing it fits inside the call's deadline."""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from pathlib import Path

import pytest

from tests.security.conftest import NOOP, run_hook
from tests.security.harness import InProcess

FS_IOC_SETFLAGS = 0x40086602
FS_IMMUTABLE_FL = 0x10

LOCKED_OUT = """
def hook(view):
    # chmod is refused, but mkdir takes a mode: write and search without read is enough to
    # fill a directory that its owner (the unprivileged supervisor) can then not list.
    os.mkdir("vault", 0o300)
    for n in range(300):
        with open(f"vault/f{n}", "wb") as f:
            f.write(b"x" * 4096)
    os.mkdir("vault/deeper", 0o300)
    for n in range(50):
        open(f"vault/deeper/g{n}", "wb").close()
    os.mkdir("vault/deeper/closed", 0o000)
    os.mkdir("closed", 0o000)
    os.mkdir("write_only", 0o200)
    os.mkdir("search_only", 0o100)
    return SpawnDecision.proceed()
"""


def test_directories_their_owner_cannot_list_are_removed_after_the_call(
    fresh: InProcess,
) -> None:
    sandbox = fresh
    root = sandbox.scratch_root
    assert root is not None
    for _ in range(2):  # every call, not just the first
        result = run_hook(sandbox, LOCKED_OUT)
        assert result.status == "ok", result
        assert sandbox.left_in_scratch_root() == []
    assert sandbox.cleanup_notes == []
    sandbox.close()
    assert not root.exists()


LISTS_ITS_SCRATCH = """
def hook(view):
    return SpawnDecision.skip(" ".join([os.getcwd(), *sorted(os.listdir("."))]))
"""


@pytest.mark.parametrize("change", ["a planted file", "a wider mode"])
def test_the_scratch_made_ahead_for_a_call_is_handed_out_only_as_it_was_made(
    fresh: InProcess, change: str
) -> None:
    sandbox = fresh
    spare = Path(sandbox.facts()["spare_scratch"])  # made during the probe, for this call
    assert run_hook(sandbox, LISTS_ITS_SCRATCH).value["reason"] == str(spare)
    spare = Path(sandbox.facts()["spare_scratch"])  # made during that call, for the next
    if change == "a planted file":
        (spare / "planted").write_text("from an earlier call\n")
    else:
        spare.chmod(0o777)
    result = run_hook(sandbox, LISTS_ITS_SCRATCH)
    assert result.status == "ok", result
    scratch, *listed = result.value["reason"].split(" ")
    assert (scratch != str(spare), listed) == (True, [])
    assert not spare.exists()
    assert sandbox.left_in_scratch_root() == []
    assert sandbox.cleanup_notes == []


@pytest.mark.timeout(60)
def test_a_scratch_that_cannot_be_removed_fails_the_call(fresh: InProcess) -> None:
    sandbox = fresh
    root = sandbox.scratch_root
    assert root is not None
    planted: list[Path] = []

    def plant_an_immutable_file() -> None:
        # Neither the plugin nor its supervisor can remove an immutable file: only root can
        # set one, so the test plays the part of whatever could leave such a thing behind.
        deadline = time.monotonic() + 5.0
        while not (running := list(root.glob("*/running"))) and time.monotonic() < deadline:
            time.sleep(0.01)
        (mark,) = running
        target = mark.parent / "immutable"
        target.write_bytes(b"x")
        _set_flags(target, FS_IMMUTABLE_FL)
        planted.append(target)

    body = """
    def hook(view):
        open("running", "w").close()
        time.sleep(0.5)
        return SpawnDecision.proceed()
    """
    planter = threading.Thread(target=plant_an_immutable_file)
    planter.start()
    try:
        result = run_hook(sandbox, body)
    finally:
        planter.join()
        for path in planted:
            _set_flags(path, 0)
    assert planted, "the immutable file was never planted"
    assert result.status == "crash", result
    assert "scratch not removed" in result.detail
    assert result.value is None
    assert run_hook(sandbox, NOOP).status == "ok"


def _set_flags(path: Path, flags: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", flags))
    finally:
        os.close(fd)


@pytest.mark.timeout(60)
def test_removing_the_scratch_is_bounded_by_the_call_deadline(fresh: InProcess) -> None:
    sandbox = fresh
    root = sandbox.scratch_root
    assert root is not None
    timeout_s = 4.0
    # 3,000 empty directories fit the entry budget and take far longer than MIN_CLEANUP_S to
    # remove (rmdir is the cost: about 0.15 ms each on ext4 here); the hook
    # returns just before the deadline, leaving the cleanup no time to do it in.
    body = """
    def hook(view):
        for n in range(3000):
            os.mkdir(f"d{n}")
        time.sleep(max(0.0, view.return_at - time.monotonic()))
        return SpawnDecision.proceed()
    """
    started = time.monotonic()
    view = {"return_at": started + timeout_s - 0.05}
    result = run_hook(sandbox, body, timeout_s=timeout_s, view=view)
    elapsed = time.monotonic() - started
    assert elapsed < timeout_s + 1.0, elapsed
    # Returned in time (a failed call for what it left) or, on a slow host, timed out.
    assert result.status in ("crash", "timeout"), result
    assert "could be removed before its deadline" in result.detail
    # The rest goes in the background; close() waits for it and removes the root.
    sandbox.close()
    assert not root.exists()
