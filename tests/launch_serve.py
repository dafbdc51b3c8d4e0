"""`python -m tests.launch_serve SITE CONFIG [ARGS...]`: the real `serve`, knowing its own pid.

SITE goes first on sys.path (the plugins a test installed). `@SERVE_PID@` in CONFIG is
replaced by this process's pid before serve reads the file: the CLI runs in this very
process, so that is serve's pid, and a hostile plugin's settings can name its target. Run
directly (a root supervisor) or through `tests.unprivileged` (a user's).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PID_PLACEHOLDER = "@SERVE_PID@"

if __name__ == "__main__":
    site, config, *args = sys.argv[1:]
    path = Path(config)
    path.write_text(path.read_text().replace(PID_PLACEHOLDER, str(os.getpid())))
    sys.path.insert(0, site)
    sys.argv = ["agent-runner", "serve", *args, "--config", config]
    from agent_runner.cli import main

    main()
