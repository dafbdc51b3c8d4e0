"""The confined child: the fork server, its Landlock and seccomp policy, the hook call it runs."""
