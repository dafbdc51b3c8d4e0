"""Test agent: print one line, then nothing, ever (a CLI hung on a dead connection).

With a file name as argv[1], first leave half-done work in it.
"""

import sys
import time

if __name__ == "__main__":
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as work:
            work.write("half of a refactoring\n")
    print("thinking...", flush=True)
    while True:
        time.sleep(3600)
