"""state.json: atomic writes, tolerant reads, and what of the loop survives a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_runner.events import format_ts
from agent_runner.supervisor.loop import state
from agent_runner.supervisor.loop.budget import DAY_S, Ledger
from agent_runner.supervisor.loop.policy import LoopState
from agent_runner.supervisor.loop.state import (
    load_state,
    loop_from_state,
    read_state,
    recover_ledger,
    recover_state,
    write_state,
)
from tests.fakes import RecordedEvents

NOW = 1_800_000_000.0
SAVED: dict[str, Any] = {
    "failures": 2,
    "crash_streak": 2,
    "stall_streak": 1,
    "auth_streak": 1,
    "internal_errors": 2,
    "transient_streaks": {"rate_limit_account": 3},
    "backoff_until": NOW + 600,
    "backoff_class": "rate_limit_account",
    "backoff_source": "server",
}


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    write_state(tmp_path, {"round": {"number": 3}})
    assert read_state(tmp_path) == {"round": {"number": 3}}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"], "no temp file is left"


def test_a_refused_write_names_state_json_the_same_way_every_time(tmp_path: Path) -> None:
    """Not the temporary file, whose name changes with every try: serve says each cause once."""
    missing = tmp_path / "gone"
    errors = []
    for _ in range(2):
        with pytest.raises(FileNotFoundError) as caught:
            write_state(missing, {})
        errors.append(str(caught.value))
    assert errors[0] == errors[1] == f"[Errno 2] No such file or directory: '{missing}/state.json'"


@pytest.mark.parametrize("content", [b"", b"{not json", b"[1, 2]", b"\x00\xff"])
def test_unreadable_state_reads_as_empty(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "state.json").write_bytes(content)
    assert read_state(tmp_path) == {}


def test_a_symlinked_state_file_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text(json.dumps({"secret": 1}))
    (tmp_path / "state.json").symlink_to(tmp_path / "elsewhere.json")
    assert read_state(tmp_path) == {}


def test_after_an_unclean_death_everything_survives() -> None:
    state = loop_from_state(SAVED, clean_exit=False, latest=NOW + 10_000)
    assert state == LoopState(**SAVED)


def test_after_a_deliberate_restart_only_the_backoff_survives() -> None:
    state = loop_from_state(SAVED, clean_exit=True, latest=NOW + 10_000)
    assert (state.crash_streak, state.stall_streak, state.auth_streak, state.failures) == (
        0,
        0,
        0,
        0,
    )
    assert (state.backoff_until, state.backoff_class) == (NOW + 600, "rate_limit_account")


def test_a_stored_backoff_is_never_trusted_past_the_cap() -> None:
    state = loop_from_state({**SAVED, "backoff_until": 1e18}, clean_exit=False, latest=NOW + 60)
    assert state.backoff_until == NOW + 60


@pytest.mark.parametrize(
    "damage",
    [
        {"crash_streak": -1},
        {"failures": "2"},
        {"backoff_until": "soon"},
        {"backoff_until": float("nan")},
        {"transient_streaks": {"x": -1}},
        {"backoff_source": "rumour"},
        {"backoff_class": 5},
    ],
)
def test_damaged_counters_reset_to_a_fresh_loop(damage: dict[str, Any]) -> None:
    assert loop_from_state({**SAVED, **damage}, clean_exit=False, latest=NOW) == LoopState()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"supervisor": "x"}', "supervisor is str, not dict"),
        (b'{"round": 5}', "round is int, not dict or NoneType"),
        (b'{"last_round": {"round": 1}}', "last_round has no exit_code"),
        (b'{"rounds_run": true}', "rounds_run is bool, not int"),
        (b'{"loop": {"failures": -1}}', "loop holds counters that are not what serve writes"),
        (b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper than 16 levels"),
        (b"[" * 5000 + b"]" * 5000, "not valid JSON: nested too deeply"),
        (b'{"rounds_run": ' + b"9" * 5000 + b"}", "not valid JSON: Exceeds the limit"),
        (b"[]", "not a JSON object but list"),
    ],
)
def test_a_damaged_state_is_named_and_read_as_empty(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "state.json").write_bytes(content)
    state, found = load_state(tmp_path)
    assert state == {}
    assert found is not None
    assert found.startswith(problem)
    assert read_state(tmp_path) == {}


def test_a_damaged_state_is_renamed_aside_with_a_timestamp_and_an_event(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_bytes(b'{"supervisor": "x"}')
    events = RecordedEvents()
    assert recover_state(tmp_path, events, NOW) == {}
    aside = tmp_path / "state.json.damaged-20270115T080000Z"
    assert events.events == [
        {
            "event": "state_file_set_aside",
            "path": str(aside),
            "reason": "supervisor is str, not dict",
        }
    ]
    assert aside.read_bytes() == b'{"supervisor": "x"}'
    assert not (tmp_path / "state.json").exists()
    (tmp_path / "state.json").mkdir()  # damaged again within the same second
    recover_state(tmp_path, events, NOW)
    assert events.events[1]["path"] == f"{aside}-1"
    assert (tmp_path / "state.json.damaged-20270115T080000Z-1").is_dir()


def test_a_missing_or_sound_state_is_left_where_it_is(tmp_path: Path) -> None:
    events = RecordedEvents()
    assert recover_state(tmp_path, events, NOW) == {}
    write_state(tmp_path, {"rounds_run": 3, "round": None})
    assert recover_state(tmp_path, events, NOW) == {"rounds_run": 3, "round": None}
    assert events.events == []


def _write_events(log_dir: Path, stamps: list[float], kind: str = "round_start") -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "events-2027-01.jsonl", "a") as handle:
        for at in stamps:
            handle.write(json.dumps({"ts": format_ts(at), "event": kind, "round": 1}) + "\n")


def test_the_spend_ledger_in_state_json_is_used_without_reading_the_event_log(
    tmp_path: Path,
) -> None:
    _write_events(tmp_path, [NOW - 60 * i for i in range(50)])
    kept = Ledger().record(NOW - 10, rounds=7)
    recovered = recover_ledger({"budget": kept.to_state()}, tmp_path, NOW)
    assert recovered.totals(NOW, DAY_S).rounds == 7


def test_a_lost_or_damaged_ledger_is_rebuilt_from_the_last_day_of_events_only(
    tmp_path: Path,
) -> None:
    _write_events(tmp_path, [NOW - 3 * DAY_S + 60 * i for i in range(100)])  # long gone
    _write_events(tmp_path, [NOW - 3600 + 60 * i for i in range(30)])
    for previous in ({}, {"budget": "damaged"}, {"budget": [[1, 2]]}):
        assert recover_ledger(previous, tmp_path, NOW).totals(NOW, DAY_S).rounds == 30


def test_a_rebuild_reads_a_bounded_number_of_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LEDGER_REBUILD_MAX_EVENTS", 40)
    _write_events(tmp_path, [NOW - 1000 + i for i in range(100)])
    assert state.recover_ledger({}, tmp_path, NOW).totals(NOW, DAY_S).rounds == 40
