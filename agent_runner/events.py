"""The event-kind registry, the JSONL event log writer and its readers (SPEC §7).

Only the supervisor writes events; every line is one `write(2)` on a descriptor opened
`O_APPEND | O_NOFOLLOW`, so concurrent readers never see half an event they cannot skip.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_runner.clock import SYSTEM_CLOCK, Clock
from agent_runner.errors import EventLogError
from agent_runner.redaction import REDACTED, redact

Emit = Callable[..., None]
EventDict = MutableMapping[str, Any]
FILE_GLOB = "events-*.jsonl"
_READ_BLOCK = 64 * 1024
MAX_LINE_BYTES = 1024 * 1024  # no event is this long; a longer "line" is damage, not data
MAX_EVENT_DEPTH = 16  # no event nests this deeply; a deeper line is damage, not data


@dataclass(frozen=True)
class Kind:
    """An event kind: its required fields and what it means."""

    name: str
    fields: tuple[str, ...]
    doc: str


def _kinds(*specs: tuple[str, str, str]) -> dict[str, Kind]:
    return {name: Kind(name, tuple(f.split()), doc) for name, f, doc in specs}


REGISTRY: dict[str, Kind] = _kinds(
    ("serve_start", "pid version work_dir log_dir", "serve booted and holds the lock"),
    ("serve_stop", "reason rounds", "serve is exiting; reason says why"),
    ("state_write_failed", "reason", "state.json could not be written (e.g. disk full)"),
    (
        "state_file_set_aside",
        "path reason",
        "a damaged state.json was renamed to path; serve starts without the old counters",
    ),
    ("config_broken", "reason", "the config could not be loaded at boot"),
    ("round_start", "round", "a round begins (gates passed)"),
    (
        "agent_spawn",
        "round pid pgid argv transcript cgroup confined landlock_abi",
        "the agent process was started (cgroup: its round cgroup, or null; confined: whether "
        "Landlock confines it, at landlock_abi, null when not)",
    ),
    (
        "agent_confinement_prepared",
        "landlock_abi writable skipped",
        "agent.confine: the agents of this serve write only beneath `writable`; skipped: "
        '"path: why" for each path left out (once per serve)',
    ),
    (
        "agent_confinement_unavailable",
        "requested reason",
        'agent.confine = "workdir-if-available" on a kernel without Landlock: the agents of '
        "this serve run unconfined (once per serve)",
    ),
    (
        "agent_tmpdir_cleanup_failed",
        "path reason",
        "a round's TMPDIR (or what an earlier serve left of one) could not be removed",
    ),
    ("agent_spawn_failed", "round reason", "the agent could not be started (counts as a failure)"),
    ("agent_exit", "round exit_code signal exit_cause duration_s", "the agent exited"),
    ("round_timeout_kill", "round budget_s", "the round hit its budget; the group is killed"),
    (
        "round_idle_kill",
        "round idle_s",
        "the agent printed nothing for runtime.idle_timeout_s; its group is killed (cause idle)",
    ),
    ("round_leftovers_reaped", "round pids", "descendants left after the round were killed"),
    (
        "round_orphan_reaped",
        "round pgid pids cgroup",
        "what a serve that died uncleanly left running was killed before anything new",
    ),
    (
        "round_end",
        "round exit_cause duration_s memory_peak_bytes cpu_s",
        "the round is over, tree secured; memory and CPU from its cgroup (null without one)",
    ),
    (
        "transcript_truncated",
        "round path bytes_left_out",
        "the transcript reached transcript_max_bytes: head and tail kept, the cut marked",
    ),
    (
        "transcript_write_failed",
        "round path reason",
        "the transcript could not be written (e.g. disk full); the rest of the output was dropped",
    ),
    ("round_deferred", "round defer_s reason", "a spawn hook deferred the round"),
    ("round_resumed", "round", "a deferred round goes ahead"),
    ("round_skipped", "round reason", "a spawn hook skipped the round"),
    ("stop_requested", "source mode", "a stop was asked for (signal, command, file)"),
    ("config_reloaded", "changed", "config edits applied from the next round"),
    ("config_reload_deferred", "changed", "config edits that wait for a restart"),
    ("config_reload_failed", "reason", "the edited config is invalid; the old one stays"),
    ("stop_file_detected", "path", "the stop file exists"),
    ("max_rounds_reached", "rounds", "max_rounds rounds have run"),
    ("transient_error_detected", "round classification reset_at detail", "rate limit or 5xx"),
    ("backoff_wait", "classification until wait_s source", "waiting out a transient error"),
    ("backoff_recovered", "round classification", "the first good round after a back-off"),
    (
        "budget_wait",
        "cap used limit until",
        "a [budget] cap is reached: no round starts until the rolling window has room (until)",
    ),
    (
        "agent_usage_recorded",
        "round model input_tokens output_tokens cache_read_tokens cache_creation_tokens cost_usd",
        "usage as the agent reported it",
    ),
    ("agent_auth_error_detected", "round reason", "the transcript shows an auth failure"),
    (
        "agent_setup_error_detected",
        "round reason",
        "the CLI refused to start in this setup (untrusted folder, no auth method, unknown model)",
    ),
    ("crash_loop", "count reason", "gave up: fast failing rounds in a row"),
    ("stalled_no_progress", "count reason", "gave up: fast clean rounds that changed nothing"),
    ("auth_failed", "count reason", "gave up: authentication keeps failing"),
    ("setup_failed", "count reason", "gave up: the CLI keeps refusing to start in this setup"),
    (
        "internal_error_loop",
        "count reason",
        "gave up: serve died of an internal error this many starts in a row",
    ),
    ("dirty_detected", "round files count", "the tree has uncommitted work after a round"),
    ("orphan_stashed", "round ref", "the work was stashed; ref is the stash commit SHA"),
    ("orphan_idempotent_skip", "round ref", "identical work was stashed moments ago"),
    ("dirty_auto_committed", "round ref files", "the work was committed"),
    ("dirty_ignored", "round reason", "the work was left in the tree"),
    (
        "work_keep_failed",
        "round reason",
        "the stash or commit is stored, but not also under refs/agent-runner/rounds/<round>",
    ),
    (
        "work_refs_pruned",
        "count refs",
        "refs/agent-runner/rounds/* older than vcs.rescue_keep_days were removed (first 20)",
    ),
    ("dirty_action_failed", "round action reason", "securing the work failed; it stays on disk"),
    (
        "work_tree_changed",
        "round path reason",
        "work_dir or its repository is not the one serve started with; nothing touched, stop",
    ),
    (
        "dirty_file_too_large",
        "round path bytes",
        "a dirty file over vcs.dirty_file_max_bytes: left on disk, not stashed or committed",
    ),
    ("dirty_intent_rejected", "round reason", "a handler's intent was invalid; builtin used"),
    ("dirty_protected_file", "round path", "the supervisor's own config is modified; left alone"),
    ("git_index_lock_cleared", "round path", "a stale index.lock no git process held was removed"),
    ("git_merge_in_progress", "round operation", "a merge/rebase is under way; tree left as is"),
    ("hook_failed", "hook plugin cause detail", "a plugin hook call failed; detail says how"),
    ("plugin_admitted", "name dist version pin families tier", "a plugin was admitted"),
    ("plugin_disabled", "name", "a plugin is disabled in config and was not imported"),
    ("plugin_refused", "name reason", "a plugin was refused"),
    (
        "plugin_builtin_name_squat",
        "name dist module",
        "a third party claims a builtin's name or agent-runner's package",
    ),
    (
        "plugin_checksum_mismatch",
        "name expected actual reason",
        "a pinned plugin's files differ from the pin or cannot be verified (actual null)",
    ),
    ("plugin_pin_unused", "name", "a [plugins.pin] entry names no discovered plugin"),
    (
        "plugin_settings_unused",
        "name",
        "a [plugins.settings] table names no admitted plugin; nothing reads it",
    ),
    (
        "dirty_handler_unavailable",
        "name reason",
        "[vcs] dirty_handler names a plugin that cannot decide; the builtin acts",
    ),
    ("plugin_sandbox_degraded", "requested achieved_tier reason", "confinement below full"),
    ("plugin_sandbox_kill", "hook signal syscall", "seccomp killed a plugin call"),
    ("plugin_call_timeout", "hook timeout_s", "a plugin call hit its deadline"),
    ("plugin_quarantined", "name reason", "a plugin failed too often; no more calls"),
    ("plugin_spawn_decision", "hook action defer_s reason", "a spawn hook's decision"),
    ("plugin_spawn_override_ignored", "hook action", "a defer/skip from a plugin not allowed to"),
    ("sandbox_server_restarted", "reason restarts", "the plugin fork server died; restarted"),
    (
        "notify_failed",
        "about reason",
        "[notify] command failed for an event of kind `about`: not started, exit status, timeout",
    ),
    (
        "round_cgroup_unavailable",
        "reason",
        "rounds run without a cgroup of their own (subreaper and scans instead); once",
    ),
    ("git_leftovers_cleared", "paths", "files a killed git left in .git were removed"),
    ("instance_lock_restored", "path", "serve.lock was deleted or replaced; serve re-created it"),
    ("log_dir_lost", "path reason", "log_dir was removed or replaced while serve ran; it stops"),
)

_SECRET_FLAG = re.compile(r"(?i)^--?[\w-]*(key|token|secret|passw|credential|auth)[\w-]*$")


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the values of secret-looking flags (`--api-key X`, `--token=X`) redacted."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        flag, eq, _value = arg.partition("=")
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif eq and _SECRET_FLAG.match(flag):
            out.append(f"{flag}={REDACTED}")
        else:
            out.append(arg)
            hide_next = bool(_SECRET_FLAG.match(arg))
    return out


def encodable(text: str) -> str:
    """`text` as valid UTF-8: undecodable bytes (surrogate escapes) shown as `\\xNN`."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate that stands for no byte
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(encodable(value))
    if isinstance(value, dict):
        return {
            encodable(k) if isinstance(k, str) else k: _redact_value(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def format_ts(epoch: float) -> str:
    """`2026-11-30T18:41:30.033Z`: UTC with milliseconds."""
    millis = int(epoch * 1000)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(millis // 1000)) + f".{millis % 1000:03d}Z"
    )


def parse_ts(text: object) -> float | None:
    """Epoch seconds from a `format_ts` timestamp, or None for anything else."""
    if not isinstance(text, str) or len(text) != 24 or not text.endswith("Z"):
        return None
    try:
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


class EventLog:
    """Appends events to `<log_dir>/events-YYYY-MM.jsonl`; refuses to follow symlinks."""

    def __init__(
        self,
        log_dir: Path,
        *,
        clock: Clock = SYSTEM_CLOCK,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.clock = clock
        self.echo = echo
        # Called with each line after it is written (the operator's notifications); never raises.
        self.tap: Callable[[str], None] | None = None
        # Reentrant: a tap may emit (a notification that could not start) from inside `emit`.
        self._lock = threading.RLock()
        self.plugin_kinds: set[str] = set()
        self._fd: int | None = None
        self._month = ""
        self._end = -1  # the file's size after our last write; -1: not known
        self._write_failed = False
        try:
            log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise EventLogError(f"{log_dir}: cannot create log_dir: {exc.strerror}") from None
        if not os.access(log_dir, os.W_OK):
            raise EventLogError(f"{log_dir}: log_dir is not writable")
        # structlog costs ~100 ms to import: only the writer needs it, never peek or --help.
        import structlog  # noqa: PLC0415

        self._logger = structlog.wrap_logger(
            self,
            processors=[self._stamp, _check_kind_processor(self), _redact_processor, _render],
            wrapper_class=structlog.BoundLogger,
            context_class=dict,
            cache_logger_on_first_use=True,
        )

    def allow_plugin_kinds(self, plugin: str, kinds: Iterator[str] | tuple[str, ...]) -> None:
        """Accept `<plugin>.<kind>` events for these kinds."""
        self.plugin_kinds.update(f"{plugin}.{kind}" for kind in kinds)

    def emit(self, kind: str, **fields: Any) -> None:
        """Write one event; an unknown kind or a missing field raises ValueError (a bug).

        Safe from any thread: notifications report their failures from their own.
        """
        with self._lock:
            self._logger.msg(kind, **fields)

    def record(self, kind: str, **fields: Any) -> None:
        """Write one event to the file but not the console: the caller reports it there itself."""
        echo, self.echo = self.echo, None
        try:
            self.emit(kind, **fields)
        finally:
            self.echo = echo

    def msg(self, line: str) -> None:
        """structlog's sink: write one rendered line."""
        # The processors made every string valid UTF-8; this is only the last line of defence.
        data = (line + "\n").encode("utf-8", "backslashreplace")
        try:
            fd = self._open(line[len('{"ts":"') :][:7])  # "YYYY-MM" of the UTC timestamp
            if self._after_torn_line(fd):
                data = b"\n" + data
            os.write(fd, data)
            self._end = os.fstat(fd).st_size
        except (OSError, EventLogError) as exc:
            if not self._write_failed:
                self._write_failed = True
                print(f"agent-runner: cannot write events: {exc}", file=sys.stderr)
        else:
            self._write_failed = False
        # The console (the journal under systemd) still gets the event when the file cannot.
        if self.echo is not None:
            try:
                self.echo(line)
            except (OSError, ValueError):
                # A closed console (`serve | head`, a vanished terminal) must not stop the loop.
                self.echo = None
        if self.tap is not None:
            self.tap(line)

    def _stamp(self, _logger: Any, _method: str, event_dict: EventDict) -> EventDict:
        kind = event_dict.pop("event")
        return {"ts": format_ts(self.clock.now()), "event": kind, **event_dict}

    def _open(self, month: str) -> int:
        if self._fd is not None and month == self._month:
            return self._fd
        self.close()
        path = self.log_dir / f"events-{month}.jsonl"
        # Read access only to check the last byte; every write still appends. O_NONBLOCK:
        # a FIFO planted at the path would otherwise take writes until its buffer fills, then
        # block serve for good.
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if os.path.islink(path):
                raise EventLogError(f"{path}: refusing to write events through a symlink") from None
            raise EventLogError(f"{path}: cannot open: {exc.strerror}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise EventLogError(f"{path}: refusing to write events into something not a file")
        self._fd, self._month, self._end = fd, month, -1
        return fd

    def _after_torn_line(self, fd: int) -> bool:
        """Whether the file ends in a partial line (a crash mid-write, another writer)."""
        size = os.fstat(fd).st_size
        if size == self._end:
            return False  # nobody wrote since our own last line
        # Never glue our event onto someone else's partial line: it would lose both.
        return size > 0 and os.pread(fd, 1, size - 1) != b"\n"

    def close(self) -> None:
        """Close the current events file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _check_kind_processor(log: EventLog) -> Callable[[Any, str, EventDict], EventDict]:
    def check(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
        check_event(event_dict, log.plugin_kinds)
        return event_dict

    return check


def check_event(event: EventDict, plugin_kinds: set[str] | frozenset[str] = frozenset()) -> None:
    """Raise ValueError unless `event` is a registered kind carrying exactly its fields."""
    name = event.get("event")
    if name in plugin_kinds:
        return
    if name not in REGISTRY:
        raise ValueError(f"unregistered event kind {name!r}")
    given = set(event) - {"event", "ts"}
    wanted = set(REGISTRY[name].fields)
    if given != wanted:
        raise ValueError(
            f"event {name}: missing {sorted(wanted - given)}, extra {sorted(given - wanted)}"
        )


def _redact_processor(_logger: Any, _method: str, event_dict: EventDict) -> EventDict:
    return {key: _redact_value(value) for key, value in event_dict.items()}


def _render(_logger: Any, _method: str, event_dict: EventDict) -> str:
    return json.dumps(event_dict, separators=(",", ":"), ensure_ascii=False, default=_as_text)


def _as_text(value: object) -> str:
    # A Path or an exception passed as a field: its text may hold undecodable bytes too.
    return redact(encodable(str(value)))


def parse_line(line: bytes) -> dict[str, Any] | None:
    """One event from one line, or None for a torn, malformed or absurdly nested line."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):  # ValueError: also an integer too long for int()
        return None
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        return None
    # Only a line with many brackets can nest deeply: the common case costs two counts.
    if line.count(b"[") + line.count(b"{") > MAX_EVENT_DEPTH and _too_deep(event):
        return None
    return event


def _too_deep(event: dict[str, Any]) -> bool:
    # Printing an event (peek --json indents) recurses once per level: refuse what no
    # event holds rather than let a reader die of it.
    stack: list[tuple[Any, int]] = [(event, 1)]
    while stack:
        item, level = stack.pop()
        if level > MAX_EVENT_DEPTH:
            return True
        if isinstance(item, dict):
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, level + 1) for child in item)
    return False


def event_files(log_dir: Path) -> list[Path]:
    """The monthly event files, oldest first (the names sort by month)."""
    try:
        return sorted(p for p in log_dir.glob(FILE_GLOB) if not p.is_symlink())
    except OSError:
        return []


def open_event_file(path: Path) -> int | None:
    """A read descriptor on the events file `path`, or None unless it is a regular file.

    Never blocks (a FIFO) and never follows a symlink.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def iter_events(log_dir: Path, kinds: frozenset[str] = frozenset()) -> Iterator[dict[str, Any]]:
    """Every readable event, oldest first, skipping torn and malformed lines; with `kinds`,
    only those (a line naming none of them is not even parsed)."""
    marks = [f'"event":"{kind}"'.encode() for kind in kinds]
    for path in event_files(log_dir):
        fd = open_event_file(path)
        if fd is None:
            continue
        try:
            with os.fdopen(fd, "rb") as handle:
                for line in handle:
                    if marks and not any(mark in line for mark in marks):
                        continue
                    event = parse_line(line)
                    if event is not None and (not kinds or event["event"] in kinds):
                        yield event
        except OSError:
            continue


def tail_events(log_dir: Path, count: int) -> list[dict[str, Any]]:
    """The last `count` events, read backwards from the end: cost does not grow with the log."""
    found: list[dict[str, Any]] = []
    if count:
        for event in events_backward(log_dir):
            found.append(event)
            if len(found) >= count:
                break
    found.reverse()
    return found


def events_backward(log_dir: Path) -> Iterator[dict[str, Any]]:
    """Every readable event, newest first: what is read grows with what the caller takes."""
    for path in reversed(event_files(log_dir)):
        fd = open_event_file(path)
        if fd is None:
            continue
        try:
            yield from _lines_backward(fd, os.fstat(fd).st_size)
        except OSError:
            continue
        finally:
            os.close(fd)


def _lines_backward(fd: int, end: int) -> Iterator[dict[str, Any]]:
    """The file's events from its end back to its start, a block at a time."""
    tail = b""  # the end of a line whose start lies before the blocks read so far
    oversized = False  # that line is longer than any event: skip it, whatever it holds
    while end > 0:
        start = max(0, end - _READ_BLOCK)
        pieces = os.pread(fd, end - start, start).split(b"\n")
        end = start
        if len(pieces) == 1:
            # No newline in this block (e.g. the NUL run a power cut leaves): bounded growth.
            if not oversized:
                tail = pieces[0] + tail
                oversized = len(tail) > MAX_LINE_BYTES
            continue
        lines = pieces[1:-1] if oversized else [*pieces[1:-1], pieces[-1] + tail]
        for line in reversed(lines):
            event = parse_line(line)
            if event is not None:
                yield event
        tail, oversized = pieces[0], False
    if not oversized:
        first = parse_line(tail)
        if first is not None:
            yield first


def format_event(event: dict[str, Any]) -> str:
    """One event as a human-readable line: `18:41:30 round_start round=42`."""
    stamp = str(event.get("ts", ""))[11:19]
    fields = " ".join(
        f"{key}={json.dumps(value, ensure_ascii=False, default=str)}"
        for key, value in event.items()
        if key not in ("ts", "event")
    )
    return f"{stamp} {event.get('event', '?')} {fields}".rstrip()


def render_docs() -> str:
    """docs/events.md, generated from the registry."""
    lines = [
        "# Events",
        "",
        "Generated from `agent_runner.events.REGISTRY` by `python -m agent_runner.events`;",
        "a test fails when this file is stale. Every line of `events-YYYY-MM.jsonl` is one",
        "JSON object with `ts` (UTC, milliseconds) and `event` (the kind) plus the fields",
        "below. Fields are append-only across versions. Plugin events are named",
        "`<plugin>.<kind>`.",
        "",
        "| kind | fields | meaning |",
        "| --- | --- | --- |",
    ]
    for kind in REGISTRY.values():
        fields = ", ".join(f"`{f}`" for f in kind.fields)
        lines.append(f"| `{kind.name}` | {fields} | {kind.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_docs())
