"""Test agent: sleep argv[1] seconds (default an hour), dying on SIGTERM like most programs."""

import sys
import time

if __name__ == "__main__":
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 3600)
