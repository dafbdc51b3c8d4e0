"""Test agent: ignore SIGTERM, fork a child in the same group that ignores it too, sleep.

argv[1], if given, is a file that receives "<pid> <child pid>" once both ignore SIGTERM.
"""

import os
import signal
import sys
import time

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        time.sleep(3600)
        os._exit(0)
    if len(sys.argv) > 1:
        tmp = sys.argv[1] + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()} {child}")
        os.rename(tmp, sys.argv[1])
    time.sleep(3600)
