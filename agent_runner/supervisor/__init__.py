"""The supervisor: the loop, boot, the agent process, and securing the work tree between rounds."""
