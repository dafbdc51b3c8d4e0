"""files.py: reads that never block, never run away and never follow a planted link;
writes that never open a planted file."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from agent_runner.files import FileRefused, read_regular, write_atomic


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"abc")
    assert read_regular(tmp_path / "a", max_bytes=3) == b"abc"


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (os.mkfifo, "a FIFO"),
        (Path.mkdir, "a directory"),
    ],
    ids=["fifo", "directory"],
)
def test_anything_but_a_regular_file_is_refused_at_once(tmp_path: Path, make, kind: str) -> None:
    path = tmp_path / "x"
    make(path)
    with pytest.raises(FileRefused, match=f"^\\[Errno 22\\] {kind}, not a regular file"):
        read_regular(path, max_bytes=10)


def test_an_endless_device_is_refused_not_read(tmp_path: Path) -> None:
    with pytest.raises(FileRefused, match="a character device, not a regular file"):
        read_regular(Path("/dev/zero"), max_bytes=10)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(FileRefused, match="a socket, not a regular file"):
            read_regular(path, max_bytes=10)


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 11)
    with pytest.raises(FileRefused, match="larger than 10 bytes"):
        read_regular(tmp_path / "big", max_bytes=10)


def test_a_symlink_is_followed_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_regular(tmp_path / "link", max_bytes=10) == b"real"
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        read_regular(tmp_path / "link", max_bytes=10, follow=False)


def test_write_atomic_replaces_a_planted_symlink_instead_of_writing_through(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "state.json").symlink_to(victim)
    write_atomic(tmp_path / "state.json", b"{}")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "state.json").is_symlink()
    assert (tmp_path / "state.json").read_bytes() == b"{}"
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "victim"]


def test_write_atomic_never_opens_a_file_planted_at_a_temporary_name(tmp_path: Path) -> None:
    # Every name the old writer would have used, planted: none of them may be opened.
    os.mkfifo(tmp_path / f".state.json.{os.getpid()}.tmp")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / f".state.json.{os.getpid()}").symlink_to(victim)
    write_atomic(tmp_path / "state.json", b"{}")
    assert (tmp_path / "state.json").read_bytes() == b"{}"
    assert victim.read_text() == "precious"
    assert stat.S_ISFIFO((tmp_path / f".state.json.{os.getpid()}.tmp").lstat().st_mode)
