"""The agent process and its boundary: spawn it gated and confined, its cgroup, its strays."""
