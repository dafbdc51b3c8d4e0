"""docs/systemd.md's OnFailure= recipe: its files, placed next to the units `install` writes,
pass `systemd-analyze verify` for the project's instance and for the reporting unit."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.conftest import Project
from tests.integration.test_systemd import healthy, render_into, verify

DOCS = Path(__file__).parents[2] / "docs" / "systemd.md"
USER_UNITS = "~/.config/systemd/user/"


def recipe_files() -> dict[str, str]:
    section = DOCS.read_text().split("## When serve itself fails: OnFailure=", 1)[1]
    section = section.split("\n## ", 1)[0]
    files = {}
    for block in re.findall(r"```ini\n(.*?)```", section, re.S):
        first, _, body = block.partition("\n")
        assert first.startswith(f"# {USER_UNITS}"), first
        files[first.removeprefix(f"# {USER_UNITS}")] = body
    assert sorted(files) == [
        "agent-runner-failed@.service",
        "agent-runner@.service.d/on-failure.conf",
    ]
    return files


def test_the_onfailure_recipe_verifies_next_to_the_installed_units(
    project: Project, tmp_path: Path
) -> None:
    healthy(project)
    unit = render_into(project, tmp_path, "user")
    for name, text in recipe_files().items():
        path = unit.parent / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir()
    done = verify("user", unit, runtime_dir)
    assert (done.returncode, done.stderr) == (0, "")
    reporter = unit.parent / f"agent-runner-failed@{unit.name}"
    done = verify("user", reporter, runtime_dir)
    assert (done.returncode, done.stderr) == (0, "")
    # The check can fail: a misspelt setting in the drop-in is reported.
    dropin = unit.parent / "agent-runner@.service.d" / "on-failure.conf"
    dropin.write_text(dropin.read_text().replace("OnFailure=", "OnFailur="))
    done = verify("user", unit, runtime_dir)
    assert "Unknown key 'OnFailur'" in done.stderr
