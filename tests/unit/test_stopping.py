"""Stop requests from real signals and the stop file, and how they combine."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_runner.supervisor.loop.stopping import StopControl
from tests.fakes import RecordedEvents


@pytest.fixture
def control(tmp_path: Path) -> Iterator[tuple[StopControl, RecordedEvents]]:
    events = RecordedEvents()
    stop = StopControl("terminate", tmp_path / "STOP", events)
    stop.install()
    yield stop, events
    stop.uninstall()


def test_sigterm_requests_the_configured_mode(control: tuple[StopControl, RecordedEvents]) -> None:
    stop, events = control
    os.kill(os.getpid(), signal.SIGTERM)
    assert (stop.mode, stop.source) == ("terminate", "SIGTERM")
    stop.announce()
    stop.announce()
    assert events.of("stop_requested") == [
        {"event": "stop_requested", "source": "SIGTERM", "mode": "terminate"}
    ]


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT, signal.SIGINT])
def test_a_closed_terminal_or_quit_stops_like_sigterm(
    control: tuple[StopControl, RecordedEvents], signum: signal.Signals
) -> None:
    stop, _ = control
    os.kill(os.getpid(), signum)
    assert (stop.mode, stop.source) == ("terminate", signum.name)


def test_after_round_then_sigint_upgrades_to_terminate(
    control: tuple[StopControl, RecordedEvents],
) -> None:
    stop, events = control
    os.kill(os.getpid(), signal.SIGUSR1)
    assert stop.mode == "finish_round"
    stop.announce()
    os.kill(os.getpid(), signal.SIGINT)
    assert (stop.mode, stop.source) == ("terminate", "SIGINT")
    stop.announce()
    assert [e["mode"] for e in events.of("stop_requested")] == ["finish_round", "terminate"]


def test_sleep_ends_at_once_on_a_signal(control: tuple[StopControl, RecordedEvents]) -> None:
    stop, _ = control
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    previous = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
    try:
        started = time.monotonic()
        assert stop.sleep(30, time.monotonic) is False
        assert time.monotonic() - started < 1
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_sleep_notices_the_stop_file(
    control: tuple[StopControl, RecordedEvents], tmp_path: Path
) -> None:
    stop, events = control
    (tmp_path / "STOP").write_text("")
    assert stop.sleep(30, time.monotonic) is False
    assert stop.source == "stop_file"
    assert events.of("stop_file_detected") == [
        {"event": "stop_file_detected", "path": str(tmp_path / "STOP")}
    ]


def test_sleep_runs_its_course_without_a_stop(control: tuple[StopControl, RecordedEvents]) -> None:
    stop, _ = control
    assert stop.sleep(0.05, time.monotonic) is True
    assert not stop.requested


@pytest.fixture
def with_requests(tmp_path: Path) -> Iterator[tuple[StopControl, Path]]:
    request = tmp_path / "stop-request"
    stop = StopControl("terminate", tmp_path / "STOP", RecordedEvents(), request_file=request)
    stop.install()
    yield stop, request
    stop.uninstall()


def test_sigterm_after_a_stop_command_names_the_command(
    with_requests: tuple[StopControl, Path],
) -> None:
    stop, request = with_requests
    request.write_text("")
    os.kill(os.getpid(), signal.SIGTERM)
    assert (stop.mode, stop.source) == ("terminate", "stop")
    assert not request.exists(), "each request is used once"


def test_a_stale_request_does_not_relabel_systemds_sigterm(
    with_requests: tuple[StopControl, Path],
) -> None:
    stop, request = with_requests
    request.write_text("")
    old = time.time() - 3600
    os.utime(request, (old, old))
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.source == "SIGTERM"
    assert not request.exists()


def test_interrupt_from_inside_serve_wakes_a_wait_on_the_stop_pipe(
    control: tuple[StopControl, RecordedEvents],
) -> None:
    stop, _ = control
    threading.Timer(0.1, stop.interrupt, args=("log_dir_lost",)).start()
    # Without the wake-up byte this select would sleep its whole 30 s.
    assert select.select([stop.wake_fd], [], [], 30)[0] == [stop.wake_fd]
    assert (stop.mode, stop.source) == ("terminate", "log_dir_lost")


def test_install_unblocks_a_stop_signal_and_takes_one_already_pending(tmp_path: Path) -> None:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        # Pending, blocked; aimed at this thread, since a test runner's other threads (pytest-xdist's
        # I/O thread) would take a process-wide SIGTERM at its default action.
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        stop = StopControl("terminate", tmp_path / "STOP", RecordedEvents())
        stop.install()
        try:
            assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
            assert (stop.mode, stop.source) == ("terminate", "SIGTERM")
        finally:
            stop.uninstall()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
