"""Test agent: print the transcript file argv[1] to stdout as-is, then exit with code argv[2].

With "hang" as argv[3] it never exits (a CLI still retrying when the round budget ran out):
the round's budget kill ends it, as it ended the recorded CLI.
"""

import sys
import time

if __name__ == "__main__":
    with open(sys.argv[1], "rb") as transcript:
        sys.stdout.buffer.write(transcript.read())
    sys.stdout.flush()
    if sys.argv[3:] == ["hang"]:
        while True:
            time.sleep(3600)
    sys.exit(int(sys.argv[2]))
