"""Test agent: record what it was given into the folder named by $ECHO_OUT.

Writes stdin.bin (all of stdin), argv.json (sys.argv) and env.json (the variables listed,
comma-separated, in $ECHO_VARS; missing ones as null).
"""

import json
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    out = Path(os.environ["ECHO_OUT"])
    (out / "stdin.bin").write_bytes(sys.stdin.buffer.read())
    (out / "argv.json").write_text(json.dumps(sys.argv))
    names = [n for n in os.environ.get("ECHO_VARS", "").split(",") if n]
    (out / "env.json").write_text(json.dumps({n: os.environ.get(n) for n in names}))
    print("echoed to stdout")
    print("echoed to stderr", file=sys.stderr)
