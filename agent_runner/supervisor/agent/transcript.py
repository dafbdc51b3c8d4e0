"""A round's transcript: the agent writes into a pipe and a relay thread moves the bytes into
`<log_dir>/rounds/round-NNNNNN.log` with splice(2), so the supervisor copies nothing itself.

Past `max_bytes` the file keeps its head and a rolling tail (what parsers read), with one
fixed-width line between them saying how much was left out. Every write of the agent
passes through `_move`, the one place that sees output arrive, and the one that stamps
`last_output_at` for the silence watchdog. Old transcripts are pruned by round number.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import select
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agent_runner.supervisor.agent.process import open_transcript

PIPE_BYTES = 1024 * 1024  # fewer wakeups for a chatty agent
TRICKLE_BYTES = 64 * 1024  # less than this per wakeup: wait GATHER_S before the next one
GATHER_S = 0.25
_CHUNK = 1024 * 1024
_ROUND_FILE = re.compile(r"^round-(\d{6,})\.log$")


def _marker(left_out: int, max_bytes: int) -> bytes:
    # Fixed width, so each new total is written over the last one in place.
    return (
        f"\n[agent-runner: {left_out:>15} bytes of output left out here; "
        f"transcript_max_bytes = {max_bytes}]\n"
    ).encode()


@dataclass(frozen=True)
class TranscriptReport:
    """What the relay did with one round's output."""

    bytes_left_out: int
    error: str | None  # the first write error (a full disk): later output was dropped


class TranscriptRelay:
    """The pipe the agent writes to and the thread that files what it writes."""

    def __init__(self, path: Path, fd: int, max_bytes: int) -> None:
        self.path = path
        self._fd = fd
        self._start = os.fstat(fd).st_size  # an earlier file is appended to, never cut into
        self._end = self._start
        self._head = max_bytes // 4
        self._tail = max_bytes // 2
        self._max_bytes = max_bytes
        self._tail_start: int | None = None  # set once the head is full and the marker written
        self._left_out = 0
        self._error: str | None = None
        # Monotonic time output last arrived; written by the relay thread only (a float
        # assignment is atomic under the GIL), read by the round's wait.
        self.last_output_at = time.monotonic()
        self._read_fd, self.agent_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._read_fd, False)
        with contextlib.suppress(OSError):  # only fewer wakeups; the default 64 KiB works too
            fcntl.fcntl(self._read_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        # A daemon: whatever happens to the round, a relay thread never keeps serve alive.
        self._thread = threading.Thread(
            target=self._relay, name=f"transcript-{path.name}", daemon=True
        )

    @classmethod
    def open(cls, path: Path, max_bytes: int) -> TranscriptRelay:
        """Create (or reopen) the transcript file; SpawnError if the path is not ours to use."""
        # No O_APPEND: splice(2) refuses it, and the relay writes at offsets it tracks itself.
        # Read access: cutting the tail copies within the file.
        return cls(path, open_transcript(path, os.O_RDWR), max_bytes)

    def start(self) -> None:
        """Once the agent holds `agent_fd`: let go of this copy and start filing output."""
        os.close(self.agent_fd)
        self.agent_fd = -1
        self._thread.start()

    def finish(self) -> TranscriptReport:
        """After the round: file what is still in flight, then close everything."""
        if self.agent_fd >= 0:  # never started: the agent was not spawned
            os.close(self.agent_fd)
            self.agent_fd = -1
        if self._thread.is_alive():
            # Every writer is dead and reaped by now, so what the pipe holds is all there is:
            # the thread files it and stops, without waiting out its gathering pause.
            os.write(self._stop_w, b"x")
            self._thread.join()
        for fd in (self._read_fd, self._stop_r, self._stop_w, self._fd):
            os.close(fd)
        return TranscriptReport(self._left_out, self._error)

    def _relay(self) -> None:
        while True:
            ready, _, _ = select.select([self._read_fd, self._stop_r], [], [])
            if self._read_fd not in ready:
                self._drain()
                return
            moved = self._drain()
            if moved is None:
                return
            # A trickle (a line now and then) is gathered for a moment rather than costing
            # a wakeup per line; a flood is never held up.
            if moved < TRICKLE_BYTES and select.select([self._stop_r], [], [], GATHER_S)[0]:
                self._drain()
                return

    def _drain(self) -> int | None:
        """Move everything the pipe holds now; the bytes moved, or None once it is closed."""
        total = 0
        while (moved := self._move()) is not None:
            if moved == 0:
                return total
            total += moved
        return None

    def _move(self) -> int | None:
        """Move one chunk into the file: its size, 0 if the pipe is empty, None at EOF."""
        try:
            if self._error is not None:
                # The file failed (a full disk): keep draining, or the agent would block on us.
                moved = len(os.read(self._read_fd, _CHUNK))
            else:
                moved = os.splice(self._read_fd, self._fd, self._room(), offset_dst=self._end)
                self._end += moved
                if moved:
                    self._keep_within_cap()
        except BlockingIOError:
            return 0
        except OSError as exc:
            if self._error is not None:
                return None  # not even reading works: nothing more can be done
            self._error = exc.strerror or str(exc)
            return 1  # not EOF: go on, dropping from here on
        if moved:
            # Arrival, not file growth: past the cap the file stops growing, on a full disk
            # the bytes are dropped, and either way the agent is still talking.
            self.last_output_at = time.monotonic()
        return moved or None

    def tail(self, limit: int) -> bytes:
        """The last `limit` bytes filed so far (read from our own descriptor, not the path)."""
        start = max(self._start, self._end - limit)
        try:
            return os.pread(self._fd, self._end - start, start)
        except OSError:
            return b""

    def _room(self) -> int:
        if self._tail_start is None:
            # Stop exactly at the end of the head, so the marker goes right after it.
            return max(1, min(_CHUNK, self._start + self._head - self._end))
        return _CHUNK

    def _keep_within_cap(self) -> None:
        if self._tail_start is None:
            if self._end < self._start + self._head:
                return
            marker = _marker(0, self._max_bytes)
            os.pwrite(self._fd, marker, self._end)
            self._end += len(marker)
            self._tail_start = self._end
            return
        slack = self._max_bytes - self._head - self._tail
        excess = self._end - self._tail_start - self._tail
        if excess < slack:
            return
        # Move the newest `tail` bytes down to the tail's start, in pieces no longer than the
        # distance they move, so no piece overlaps the bytes it is copied from.
        done = 0
        while done < self._tail:
            piece = min(excess, self._tail - done)
            dst = self._tail_start + done
            done += _copy_within(self._fd, dst + excess, dst, piece)
        self._end = self._tail_start + self._tail
        os.ftruncate(self._fd, self._end)
        self._left_out += excess
        marker_at = self._tail_start - len(_marker(0, self._max_bytes))
        os.pwrite(self._fd, _marker(self._left_out, self._max_bytes), marker_at)


def _copy_within(fd: int, src: int, dst: int, count: int) -> int:
    """Copy up to `count` bytes from offset `src` to `dst` of one file; the bytes copied."""
    try:
        return os.copy_file_range(fd, fd, count, offset_src=src, offset_dst=dst)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
    # A file system without in-kernel copies: through a bounded buffer instead.
    data = os.pread(fd, min(count, _CHUNK), src)
    return os.pwrite(fd, data, dst)


def prune_transcripts(rounds_dir: Path, *, newest: int, keep: int, above: int = 0) -> int:
    """Delete round transcripts numbered above `above` and at most `newest - keep`.

    Returns the highest number now known pruned, the next call's `above`. `above=0` scans
    the folder (at boot); later calls unlink by name, so a round costs one unlink, not a
    listing. `keep=0` keeps everything.
    """
    last = newest - keep
    if keep == 0 or last <= above:
        return above
    if above == 0:
        try:
            names = [entry.name for entry in os.scandir(rounds_dir)]
        except OSError:
            return above
        numbers = [int(m[1]) for name in names if (m := _ROUND_FILE.match(name))]
        doomed = [n for n in numbers if n <= last]
    else:
        doomed = list(range(above + 1, last + 1))
    for number in doomed:
        with contextlib.suppress(FileNotFoundError):
            (rounds_dir / f"round-{number:06d}.log").unlink()
    return last
