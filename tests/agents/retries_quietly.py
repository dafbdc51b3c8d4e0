"""Test agent: argv[2] times, print a line and then nothing for argv[1] seconds; then succeed.

With "announce" as argv[3] each line is Claude Code's `api_retry`, naming that wait in
`retry_delay_ms`, as the real CLI prints before it waits on a rate limit; with "plain" it is
ordinary text, which announces nothing.
"""

import json
import sys
import time

if __name__ == "__main__":
    gap_s, count, style = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    for attempt in range(1, count + 1):
        if style == "announce":
            retry = {
                "type": "system",
                "subtype": "api_retry",
                "attempt": attempt,
                "max_retries": 10,
                "retry_delay_ms": int(gap_s * 1000),
                "error_status": 429,
                "error": "rate_limit",
            }
            print(json.dumps(retry), flush=True)
        else:
            print(f"still working on step {attempt}", flush=True)
        time.sleep(gap_s)
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False}), flush=True)
