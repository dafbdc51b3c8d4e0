"""The real CLI with one supervisor function replaced by one that raises: a stand-in for a bug.

Usage: python faulty_cli.py MODULE:NAME[.NAME] CLI-ARGS...
(e.g. agent_runner.supervisor.loop.round:secure_tree, agent_runner.supervisor.loop.serve:Serve._sleep)
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn


def _bug(*_args: object, **_kwargs: object) -> NoReturn:
    raise RuntimeError("injected bug")


if __name__ == "__main__":
    module_name, _, path = sys.argv[1].partition(":")
    *owners, attribute = path.split(".")
    owner: object = importlib.import_module(module_name)
    for name in owners:
        owner = getattr(owner, name)
    assert hasattr(owner, attribute), sys.argv[1]
    setattr(owner, attribute, _bug)
    from agent_runner.cli import run

    sys.exit(run(sys.argv[2:]))
