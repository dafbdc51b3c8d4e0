"""Read-only views of a project: peek, status, events, doctor. None of them writes events."""
