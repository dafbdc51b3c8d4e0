"""Test agent: a chain of argv[1] processes (default 100), every link forking short-lived children.

Links alternate between staying in the group and calling setsid, and keep forking while
anyone tries to kill them, so a killer working from a stale process list misses some.
"""

import os
import sys
import time

if __name__ == "__main__":
    links = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    while links > 0 and os.fork() == 0:
        links -= 1
        if links % 2:
            os.setsid()
    while True:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.002)
