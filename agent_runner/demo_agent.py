"""The bundled demo agent: edits a file each round and speaks Claude's stream-json.

Odd rounds commit their edit, even rounds leave it for the supervisor to secure; round
`AGENT_RUNNER_DEMO_LIMIT_ROUND` (default 2) edits, then hits a rate limit that resets in 3 s.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from agent_runner import vcs

MODEL = "demo-model-1"


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main() -> int:
    prompt = sys.stdin.read()
    round_no = int(os.environ.get("AGENT_RUNNER_ROUND", "1"))
    limit_round = int(os.environ.get("AGENT_RUNNER_DEMO_LIMIT_ROUND", "2"))
    say(type="system", subtype="init", model=MODEL, cwd=os.getcwd())
    notes = Path("NOTES.md")
    with notes.open("a", encoding="utf-8") as handle:
        handle.write(f"- round {round_no}: read a {len(prompt)}-character prompt\n")
    if round_no == limit_round:
        # Half-done work, then the provider refuses: the supervisor must stash the edit.
        resets_at = int(time.time()) + 3
        info = {"status": "rejected", "rateLimitType": "five_hour", "resetsAt": resets_at}
        say(type="rate_limit_event", rate_limit_info=info)
        say(
            type="result",
            subtype="error_during_execution",
            is_error=True,
            api_error_status=429,
            result="rate limited (simulated)",
            usage={"input_tokens": 12, "output_tokens": 0},
        )
        return 1
    committed = round_no % 2 == 1
    if committed:
        vcs.run_git(Path.cwd(), "add", "NOTES.md")
        vcs.run_git(Path.cwd(), "commit", "-q", "-m", f"demo: notes from round {round_no}")
    say(
        type="assistant",
        message={"model": MODEL, "content": [{"type": "text", "text": "Edited NOTES.md"}]},
    )
    usage = {
        "input_tokens": 1200 + round_no,
        "output_tokens": 80,
        "cache_read_input_tokens": 300,
        "cache_creation_input_tokens": 0,
    }
    say(
        type="result",
        subtype="success",
        is_error=False,
        result="edited NOTES.md",
        usage=usage,
        total_cost_usd=0.0123,
        committed=committed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
