"""Record the real agent CLIs against fake provider APIs on loopback (`make record`).

Nothing here is part of agent-runner: it is the tooling behind tests/fixtures/transcripts/real.
"""
