"""Spend caps with a 1,000,000-line event history: what the budget check adds to each round.

Prints medians; asserts nothing.
- the ledger work serve does per round (record the round, record its usage, check the caps,
  encode the ledger into state.json) with the ledger at its largest (a round every minute
  for a day), and how much bigger state.json gets;
- rebuilding the ledger at boot when state.json is lost, from the 1,000,000-line log;
- restart latency of a real serve (agent exit -> next agent exec) with caps set and without,
  both with the 1,000,000-line log on disk;
- stop latency during a budget wait (target <= 0.3 s, like every wait).
"""

from __future__ import annotations

import json
import signal
import statistics
import tempfile
import time
from pathlib import Path

import tomli_w
from bench_serve import serve, stamp_gaps, wait_event

from agent_runner.config import BudgetConfig
from agent_runner.events import format_ts
from agent_runner.supervisor.loop import budget
from agent_runner.supervisor.loop.state import recover_ledger

LINES = 1_000_000
HISTORY_DAYS = 30
ROUNDS = 40
STOP_RUNS = 5
CAPS = BudgetConfig(
    max_cost_usd_per_day=10**6, max_tokens_per_day=10**12, max_rounds_per_hour=10**5
)


def write_history(log_dir: Path, now: float) -> None:
    """LINES events: rounds of five events each, evenly over the last HISTORY_DAYS days."""
    log_dir.mkdir(parents=True)
    rounds = LINES // 5
    step = HISTORY_DAYS * budget.DAY_S / rounds
    with open(log_dir / "events-2027-01.jsonl", "w") as handle:
        for start in range(0, rounds, 2000):
            chunk = []
            for n in range(start, min(start + 2000, rounds)):
                ts = format_ts(now - HISTORY_DAYS * budget.DAY_S + n * step)
                chunk += [
                    f'{{"ts":"{ts}","event":"round_start","round":{n}}}\n',
                    f'{{"ts":"{ts}","event":"agent_spawn","round":{n},"pid":1,"pgid":1,"argv":["x"],"transcript":"t"}}\n',
                    f'{{"ts":"{ts}","event":"agent_exit","round":{n},"exit_code":0,"signal":null,"exit_cause":"clean","duration_s":1.0}}\n',
                    f'{{"ts":"{ts}","event":"agent_usage_recorded","round":{n},"model":"m","input_tokens":1000,"output_tokens":200,"cache_read_tokens":0,"cache_creation_tokens":0,"cost_usd":0.01}}\n',
                    f'{{"ts":"{ts}","event":"round_end","round":{n},"exit_cause":"clean","duration_s":1.0}}\n',
                ]
            handle.write("".join(chunk))


def per_round_us(ledger: budget.Ledger, now: float) -> tuple[list[float], list[float]]:
    """Microseconds of one round's ledger work, and of the same state write's encoding
    without it (what the rest of state.json costs to encode), for each of 2,000 rounds."""
    state = {"supervisor": {"pid": 1, "phase": "running"}, "loop": {"failures": 0}}
    with_ledger, without = [], []
    for i in range(2000):
        at = now + i
        started = time.perf_counter()
        ledger = ledger.record(at, rounds=1)
        ledger = ledger.record(at, tokens=1200, cost_usd=0.01)
        budget.check(ledger, CAPS, at)
        json.dumps({**state, "budget": ledger.to_state()})
        with_ledger.append((time.perf_counter() - started) * 1e6)
        started = time.perf_counter()
        json.dumps(state)
        without.append((time.perf_counter() - started) * 1e6)
    return with_ledger, without


def full_ledger(now: float) -> budget.Ledger:
    ledger = budget.Ledger()
    for minute in range(1440):
        ledger = ledger.record(
            now - budget.DAY_S + 60 * (minute + 1), rounds=1, tokens=1200, cost_usd=0.01
        )
    return ledger


def rebuild_ms(log_dir: Path, now: float) -> float:
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        ledger = recover_ledger({}, log_dir, now)
        samples.append((time.perf_counter() - started) * 1000)
    assert ledger.totals(now, budget.DAY_S).rounds > 0
    return statistics.median(samples)


def project(root: Path, command: list[str], caps: dict[str, object], **runtime: object) -> Path:
    work = root / "work"
    (work / "prompts").mkdir(parents=True)
    (work / "prompts" / "main.md").write_text("go\n")
    config = work / "agent-runner.toml"
    document: dict[str, object] = {
        "schema_version": 1,
        "agent": {"command": command, "parser": "claude"},
        "runtime": {"log_dir": str(root / "logs"), "restart_delay_s": 0, **runtime},
        "breakers": {"stalled_rounds": 10_000},
    }
    if caps:
        document["budget"] = caps
    config.write_text(tomli_w.dumps(document))
    return config


def restart_latency_ms(caps: dict[str, object], now: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_history(root / "logs", now)
        stamps = root / "stamps"
        script = f"date +%s.%N >> {stamps}.start; date +%s.%N >> {stamps}.end"
        proc = serve(project(root, ["sh", "-c", script], caps), "--max-rounds", str(ROUNDS))
        proc.wait()
        return statistics.median(stamp_gaps(stamps))


def stop_latencies(runs: int = STOP_RUNS) -> list[float]:
    """SIGTERM -> serve's exit during a budget wait, in ms, once per run."""
    samples = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            config = project(root, ["true"], {"max_rounds_per_hour": 1})
            proc = serve(config)
            wait_event(root / "logs", "budget_wait")
            time.sleep(0.2)
            started = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            samples.append((time.perf_counter() - started) * 1000)
    return samples


if __name__ == "__main__":
    now = time.time()
    ledger = full_ledger(now)
    with_us, without_us = (statistics.median(s) for s in per_round_us(ledger, now))
    size = len(json.dumps(ledger.to_state()))
    rows = len(ledger.hour) + len(ledger.day)
    print(
        f"ledger work per round, {rows} rows: median {with_us:.0f} us"
        f" (state.json without it encodes in {without_us:.0f} us); ledger adds {size / 1024:.0f} KiB"
    )
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = Path(tmp) / "logs"
        write_history(log_dir, now)
        print(
            f"ledger rebuilt at boot from {LINES:,} event lines: median {rebuild_ms(log_dir, now):.0f} ms"
        )
    caps = {
        "max_cost_usd_per_day": 10**6,
        "max_tokens_per_day": 10**12,
        "max_rounds_per_hour": 10**5,
    }
    print(
        f"restart latency with {LINES:,} events, no caps:   median {restart_latency_ms({}, now):.1f} ms over {ROUNDS} rounds"
    )
    print(
        f"restart latency with {LINES:,} events, all caps:  median {restart_latency_ms(caps, now):.1f} ms over {ROUNDS} rounds"
    )
    print(
        f"stop latency during a budget wait: median {statistics.median(stop_latencies()):.0f} ms over {STOP_RUNS} runs"
    )
