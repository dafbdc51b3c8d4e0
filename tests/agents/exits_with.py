"""Test agent: sleep argv[2] seconds (default 0), then exit with the code in argv[1]."""

import sys
import time

if __name__ == "__main__":
    if len(sys.argv) > 2:
        time.sleep(float(sys.argv[2]))
    sys.exit(int(sys.argv[1]))
