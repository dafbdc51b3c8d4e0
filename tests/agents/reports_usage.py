"""Test agent: succeed as Claude Code does in stream-json mode, reporting usage in its final
`result` line: cost argv[1] USD, argv[2] input and argv[3] output tokens (as recorded from
claude 2.1.332: init line, assistant message, result with `usage` and `total_cost_usd`)."""

import json
import os
import sys

if __name__ == "__main__":
    cost, input_tokens, output_tokens = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    session = f"session-{os.environ.get('AGENT_RUNNER_ROUND', '0')}"
    lines = [
        {"type": "system", "subtype": "init", "model": "claude-sonnet-5", "session_id": session},
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            "session_id": session,
        },
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": 1,
            "result": "Done.",
            "session_id": session,
            "total_cost_usd": cost,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 12,
                "output_tokens": output_tokens,
            },
        },
    ]
    for line in lines:
        print(json.dumps(line), flush=True)
