"""Test agent: a chain of argv[1] + 1 processes, every link forking short-lived children forever.

Links alternate between staying in the group and calling setsid, and keep forking while
anyone tries to kill them, so a killer working from a stale process list misses some.
The last link creates the file argv[2], if given, once the chain is complete.
"""

import os
import sys
import time

if __name__ == "__main__":
    links = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    while links > 0 and os.fork() == 0:
        links -= 1
        if links % 2:
            os.setsid()
    if links == 0 and len(sys.argv) > 2:
        open(sys.argv[2], "w").close()
    while True:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.01)
