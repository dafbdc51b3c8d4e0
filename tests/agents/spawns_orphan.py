"""Test agent: leave a setsid'd grandchild and a double-forked daemon behind, then exit or sleep.

Usage: spawns_orphan.py PIDS_FILE [exit|sleep]. PIDS_FILE receives "<grandchild> <daemon>"
(written atomically) once both exist.
"""

import os
import sys
import time


def setsid_grandchild() -> int:
    pid = os.fork()
    if pid == 0:
        os.setsid()
        time.sleep(3600)
        os._exit(0)
    return pid


def double_forked_daemon() -> int:
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        daemon = os.fork()
        if daemon == 0:
            os.close(w)
            time.sleep(3600)
            os._exit(0)
        os.write(w, str(daemon).encode())
        os._exit(0)
    os.close(w)
    daemon = int(os.read(r, 32))
    os.waitpid(middle, 0)
    return daemon


if __name__ == "__main__":
    pids = f"{setsid_grandchild()} {double_forked_daemon()}"
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(pids)
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "sleep":
        time.sleep(3600)
