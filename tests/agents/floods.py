"""Test agent: print argv[1] numbered lines to stdout (and every 100th to stderr), then
Claude's final result line, and exit 0."""

import json
import sys

if __name__ == "__main__":
    out = sys.stdout.buffer
    for i in range(int(sys.argv[1])):
        line = f"line {i:09d} {'x' * 40}\n".encode()
        (sys.stderr.buffer if i % 100 == 99 else out).write(line)
    out.write(
        json.dumps(
            {"type": "result", "is_error": False, "usage": {"input_tokens": 7, "output_tokens": 3}}
        ).encode()
        + b"\n"
    )
    out.flush()
