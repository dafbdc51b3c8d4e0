"""The supervisor: one round, the loop around it, and securing the work tree between rounds."""
