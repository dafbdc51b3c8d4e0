"""Test agent: work until the file argv[1] exists (at most a minute), then exit 0.

Lets a test hold a round open for exactly as long as its checks take, with no timing window.
"""

import sys
import time
from pathlib import Path

if __name__ == "__main__":
    release = Path(sys.argv[1])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(0 if release.exists() else 1)
