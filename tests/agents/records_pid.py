"""Test agent: append its pid to argv[1] (one line per start), then sleep argv[2] seconds."""

import os
import sys
import time

if __name__ == "__main__":
    with open(sys.argv[1], "a") as record:
        record.write(f"{os.getpid()}\n")
    time.sleep(float(sys.argv[2]))
