"""The supervisor side of a plugin call: the fork server client, the sandbox, hook dispatch."""
