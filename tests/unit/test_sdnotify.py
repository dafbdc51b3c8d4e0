"""The sd_notify client against a real datagram socket."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from agent_runner.sdnotify import Notifier


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    notifier.send(READY=1)  # must not raise


def test_messages_are_newline_separated_assignments(tmp_path: Path) -> None:
    path = str(tmp_path / "n.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        notifier = Notifier({"NOTIFY_SOCKET": path})
        notifier.send(READY=1, STATUS="round 1 running")
        assert sock.recv(100) == b"READY=1\nSTATUS=round 1 running"
        notifier.close()


def test_abstract_socket_address_uses_a_leading_nul() -> None:
    assert Notifier({"NOTIFY_SOCKET": "@foo"}).address == "\0foo"


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    assert Notifier({"WATCHDOG_USEC": "30000000"}).watchdog_interval_s == 15
    assert Notifier({"WATCHDOG_USEC": "0"}).watchdog_interval_s is None
    assert Notifier({"WATCHDOG_USEC": "junk"}).watchdog_interval_s is None


def test_watchdog_meant_for_another_pid_is_ignored() -> None:
    env = {"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier(env).watchdog_interval_s is None
    env["WATCHDOG_PID"] = str(os.getpid())
    assert Notifier(env).watchdog_interval_s == 0.5


def test_a_vanished_socket_never_raises(tmp_path: Path) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    notifier.send(WATCHDOG=1)
    notifier.close()


def test_a_reader_that_never_reads_cannot_block_the_sender(tmp_path: Path) -> None:
    path = str(tmp_path / "n.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        notifier = Notifier({"NOTIFY_SOCKET": path})
        for _ in range(10_000):  # far more than a datagram queue holds
            notifier.send(WATCHDOG=1)
        notifier.close()


def test_status_is_sent_only_when_it_changes(tmp_path: Path) -> None:
    path = str(tmp_path / "n.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.2)
        notifier = Notifier({"NOTIFY_SOCKET": path})
        for text in ("round 1 running 0m", "round 1 running 0m", "round 1 running 1m"):
            notifier.status(text)
        notifier.close()
        assert sock.recv(100) == b"STATUS=round 1 running 0m"
        assert sock.recv(100) == b"STATUS=round 1 running 1m"
