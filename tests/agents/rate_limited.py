"""Test agent: on the rounds listed in argv[2] (comma-separated; default all), report a Claude
rate limit that resets argv[1] seconds from now and exit 1; on other rounds exit 0."""

import json
import os
import sys
import time

if __name__ == "__main__":
    reset_in = float(sys.argv[1])
    rounds = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    if rounds is None or os.environ["AGENT_RUNNER_ROUND"] in rounds:
        info = {
            "status": "rejected",
            "rateLimitType": "five_hour",
            "resetsAt": time.time() + reset_in,
        }
        print(json.dumps({"type": "rate_limit_event", "rate_limit_info": info}))
        sys.exit(1)
