"""The silence watchdog's arithmetic with a fake clock and a fake transcript relay."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_runner.supervisor.loop.silence import SilenceWatch, silence_deadline
from tests.fakes import FakeClock

RETRY = b'{"type":"system","subtype":"api_retry","retry_delay_ms":30000}\n'


@dataclass
class FakeOutput:
    last_output_at: float
    text: bytes = b""
    reads: list[int] = field(default_factory=list)

    def tail(self, limit: int) -> bytes:
        self.reads.append(limit)
        return self.text[-limit:]

    def says(self, clock: FakeClock, text: bytes) -> None:
        self.text += text
        self.last_output_at = clock.monotonic()


def watch(clock: FakeClock, output: FakeOutput, timeout_s: float = 10) -> SilenceWatch:
    return SilenceWatch(timeout_s, output, "claude", clock.monotonic)


def test_the_deadline_adds_an_announced_wait_to_the_window() -> None:
    assert silence_deadline(100.0, 10.0, None) == 110.0
    assert silence_deadline(100.0, 10.0, 30.0) == 140.0


def test_silence_shorter_than_the_window_goes_on() -> None:
    clock = FakeClock()
    output = FakeOutput(clock.monotonic(), b"working\n")
    silence = watch(clock, output)
    clock.advance(9.9)
    assert silence.silent_s() is None
    assert round(silence.due_in(), 3) == 0.1
    assert output.reads == []  # the tail is not read before the window ran out


def test_silence_as_long_as_the_window_ends_the_round() -> None:
    clock = FakeClock()
    output = FakeOutput(clock.monotonic(), b"working\n")
    silence = watch(clock, output)
    clock.advance(10)
    assert silence.silent_s() == 10
    assert silence.due_in() == 0


def test_output_restarts_the_window() -> None:
    clock = FakeClock()
    output = FakeOutput(clock.monotonic())
    silence = watch(clock, output)
    for _ in range(5):
        clock.advance(8)
        output.says(clock, b"still working\n")
        assert silence.silent_s() is None
    clock.advance(10)
    assert silence.silent_s() == 10


def test_an_announced_retry_wait_is_not_silence() -> None:
    clock = FakeClock()
    output = FakeOutput(clock.monotonic(), RETRY)
    silence = watch(clock, output)
    clock.advance(10)
    assert silence.silent_s() is None  # 30 s announced: silent until 40 s
    assert silence.due_in() == 30
    clock.advance(29.9)
    assert silence.silent_s() is None
    clock.advance(0.1)
    assert silence.silent_s() == 40
    assert len(output.reads) == 1  # read once per silence, at the first deadline


def test_an_announcement_followed_by_other_output_no_longer_counts() -> None:
    clock = FakeClock()
    output = FakeOutput(clock.monotonic(), RETRY)
    silence = watch(clock, output)
    clock.advance(10)
    assert silence.silent_s() is None
    output.says(clock, b"retried, now thinking\n")
    clock.advance(10)
    assert silence.silent_s() == 10
    assert len(output.reads) == 2


def test_each_new_retry_line_is_read_again() -> None:
    clock = FakeClock()
    output = FakeOutput(clock.monotonic(), RETRY)
    silence = watch(clock, output)
    for _ in range(4):
        clock.advance(30)
        assert silence.silent_s() is None
        output.says(clock, RETRY)
    assert len(output.reads) == 4
