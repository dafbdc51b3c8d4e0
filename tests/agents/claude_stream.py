"""Test agent: edit files in the work tree, print a Claude Code stream-json transcript.

`claude_stream.py [--tool-calls N] [--overloaded] [--limited-for S] [--write PATH]...`: each
PATH gets the round number; N assistant messages carry a tool_use block; --overloaded ends
with the API's 529 result (exit 1), as Claude Code prints it, instead of a success;
--limited-for ends with a rejected five-hour limit that resets in S seconds (exit 1).
"""

import argparse
import json
import os
import time
from pathlib import Path

OVERLOADED = (
    'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
)


def emit(message: dict) -> None:
    print(json.dumps(message), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool-calls", type=int, default=0)
    parser.add_argument("--overloaded", action="store_true")
    parser.add_argument("--limited-for", type=float)
    parser.add_argument("--write", action="append", default=[])
    args = parser.parse_args()
    round_no = os.environ.get("AGENT_RUNNER_ROUND", "?")
    for name in args.write:
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"written in round {round_no}\n")
    emit({"type": "system", "subtype": "init", "model": "claude-sonnet-4-5"})
    for number in range(args.tool_calls):
        block = {"type": "tool_use", "id": f"toolu_{number}", "name": "Edit", "input": {}}
        emit({"type": "assistant", "message": {"role": "assistant", "content": [block]}})
        emit({"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}})
    if args.limited_for is not None:
        info = {"status": "rejected", "rateLimitType": "five_hour"}
        emit(
            {
                "type": "rate_limit_event",
                "rate_limit_info": info | {"resetsAt": int(time.time() + args.limited_for)},
            }
        )
        emit({"type": "result", "is_error": True, "result": "Claude AI usage limit reached"})
        raise SystemExit(1)
    if args.overloaded:
        emit({"type": "result", "subtype": "success", "is_error": True, "result": OVERLOADED})
        raise SystemExit(1)
    emit({"type": "result", "subtype": "success", "is_error": False, "result": "done"})
