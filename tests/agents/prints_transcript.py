"""Test agent: print the transcript file argv[1] to stdout as-is, then exit with code argv[2]."""

import sys

if __name__ == "__main__":
    with open(sys.argv[1], "rb") as transcript:
        sys.stdout.buffer.write(transcript.read())
    sys.stdout.flush()
    sys.exit(int(sys.argv[2]))
