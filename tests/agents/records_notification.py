"""Test notify command: append what it got (stdin, AGENT_RUNNER_* and two other variables,
its pid) as one JSON line to the file argv[1]; then, by argv[2]: "ok" exit 0, "fail" print
a reason and exit 3, "hang" start a child in its own group and wait forever, "flood" print
10 MiB and exit 1."""

import json
import os
import subprocess
import sys
import time

if __name__ == "__main__":
    record, mode = sys.argv[1], sys.argv[2]
    received = {
        "stdin": sys.stdin.read(),
        "env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith("AGENT_RUNNER_") or k in ("NOTIFY_SOCKET", "SECRET_FOR_NOTIFY")
        },
        "pid": os.getpid(),
        "cwd": os.getcwd(),
    }
    if mode == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        received["child"] = child.pid
    with open(record, "a") as out:
        out.write(json.dumps(received) + "\n")
    if mode == "fail":
        print("connecting to mail.example: refused")
        sys.exit(3)
    if mode == "hang":
        while True:
            time.sleep(3600)
    if mode == "flood":
        sys.stdout.write("x" * (10 * 1024 * 1024) + "\nlast words\n")
        sys.exit(1)
