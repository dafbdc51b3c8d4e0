"""`python -m recording`: record the real CLIs (see scripts/record-transcripts)."""

from recording.cli import main

main()
