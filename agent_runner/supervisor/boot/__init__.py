"""Boot: the checks a config must pass, the one-serve-per-tree lock, and serve's startup."""
