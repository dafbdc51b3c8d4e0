"""`python -m agent_runner` and the `agent-runner` script: settle Ctrl-C first, then the CLI."""

import signal


def main() -> None:
    """Console-script entry point."""
    # Until serve installs its own handlers (a Ctrl-C is then a clean stop), Ctrl-C ends the
    # program the way it ends any other: killed by SIGINT, not a Python traceback.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from agent_runner.cli import main as run_cli  # noqa: PLC0415 -- after the line above

    run_cli()


if __name__ == "__main__":
    main()
