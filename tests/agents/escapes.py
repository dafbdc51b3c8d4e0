"""Test agent: scatter descendants every way a process can leave its group, then sleep.

Usage: escapes.py DIR [scrub] [exit | exit-gen1]. It leaves a setsid grandchild, a double-forked daemon
in a group of its own (setpgid), and with `scrub` one more that also drops its whole
environment (so no marker finds it). Each escapee's argv carries `escapee-<generation>`, the
generation being $TEST_GENERATION; DIR/<generation>.pids receives every pid, its own first
(written atomically), once all exist; `<generation>.dirty` in the work tree makes it dirty.
With `exit` it exits then (`exit-gen1`: only when the generation ends in "gen1", so a second
serve's agent keeps running); otherwise it sleeps.
"""

import os
import sys
import time

SLEEP_S = "3600"


def sleeper(tag: str, *, scrub: bool = False) -> list[str]:
    argv = [sys.executable, "-c", f"import time; time.sleep({SLEEP_S})", tag]
    if scrub:
        os.execve(sys.executable, argv, {})
    os.execv(sys.executable, argv)
    return argv  # never reached


def setsid_grandchild(tag: str) -> int:
    pid = os.fork()
    if pid == 0:
        os.setsid()
        sleeper(tag)
    return pid


def double_forked(tag: str, *, new_session: bool, scrub: bool = False) -> int:
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        if new_session:
            os.setsid()
        else:
            os.setpgid(0, 0)
        daemon = os.fork()
        if daemon == 0:
            os.close(w)
            sleeper(tag, scrub=scrub)
        os.write(w, str(daemon).encode())
        os._exit(0)
    os.close(w)
    daemon = int(os.read(r, 32))
    os.waitpid(middle, 0)
    return daemon


if __name__ == "__main__":
    folder, generation = sys.argv[1], os.environ.get("TEST_GENERATION", "0")
    tag = f"escapee-{generation}"
    pids = [os.getpid(), setsid_grandchild(tag), double_forked(tag, new_session=False)]
    if "scrub" in sys.argv[2:]:
        pids.append(double_forked(tag, new_session=True, scrub=True))
    with open(f"{generation}.dirty", "w") as f:
        f.write("work in progress\n")
    target = os.path.join(folder, f"{generation}.pids")
    with open(target + ".tmp", "w") as f:
        f.write(" ".join(map(str, pids)))
    os.rename(target + ".tmp", target)
    exits = "exit" in sys.argv[2:] or ("exit-gen1" in sys.argv[2:] and generation.endswith("gen1"))
    if not exits:
        time.sleep(float(SLEEP_S))
