"""Fixtures shared by every test folder: the plugins under tests/plugins and examples/, built
and installed.

Each package is built into a real wheel (hatchling) and installed with pip into its own
`--target` folder once per session; a test copies the installs it needs into a site folder of
its own and puts that on the supervisor's `sys.path`. The virtualenv is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

PLUGIN_SOURCES = Path(__file__).parent / "plugins"
EXAMPLE_SOURCES = Path(__file__).parents[1] / "examples"
MARKER_PLACEHOLDER = "@MARKER_DIR@"
# Runs the real CLI with chosen folders in front of and behind the interpreter's own sys.path.
_LAUNCH = """\
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
sys.path += json.loads(sys.argv[2])
sys.argv[:3] = ["agent-runner"]
from agent_runner.cli import main
main()
"""


@dataclass(frozen=True)
class PluginInstalls:
    """The built wheels, their pristine installs, and the folder import payloads write into."""

    wheels: dict[str, Path]
    installs: dict[str, Path]
    marker_dir: Path

    def site(self, folder: Path, *packages: str) -> Path:
        """`folder`, holding a copy of each named install (so a test may tamper with it)."""
        folder.mkdir(parents=True, exist_ok=True)
        for package in packages:
            shutil.copytree(self.installs[package], folder, symlinks=True, dirs_exist_ok=True)
        return folder

    def markers(self) -> list[tuple[int, int]]:
        """(pid, parent pid) of every process that ran an import-time payload so far."""
        found = []
        for marker in sorted(self.marker_dir.iterdir()):
            pid, ppid = marker.read_text().split()
            found.append((int(pid), int(ppid)))
        return found

    def clear_markers(self) -> None:
        for marker in self.marker_dir.iterdir():
            marker.unlink()


def build_wheel(source: Path, out: Path) -> Path:
    """Build `source` (a package with a pyproject.toml) into a wheel in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, hatchling.build as b; print(b.build_wheel(sys.argv[1]))",
            str(out),
        ],
        cwd=source,
        capture_output=True,
        text=True,
        check=True,
    )
    return out / done.stdout.strip().splitlines()[-1]


def install_wheel(wheel: Path, target: Path) -> None:
    """`pip install --target`, offline, without dependencies."""
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"),
            *("--disable-pip-version-check", "--target", str(target), str(wheel)),
        ],
        capture_output=True,
        check=True,
    )


@pytest.fixture(scope="session")
def plugin_installs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PluginInstalls]:
    # Outside pytest's 0700 base folder: a sandbox child running as nobody must reach it.
    marker_dir = Path(tempfile.mkdtemp(prefix="agent-runner-markers-"))
    marker_dir.chmod(0o1777)
    root = tmp_path_factory.mktemp("plugins")
    wheels, installs = {}, {}
    try:
        sources = [
            *PLUGIN_SOURCES.glob("*/pyproject.toml"),
            *EXAMPLE_SOURCES.glob("*/pyproject.toml"),
        ]
        for source in sorted(sources):
            package = source.parent.name
            copy = root / "src" / package
            shutil.copytree(source.parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
            for module in copy.rglob("*.py"):
                text = module.read_text()
                module.write_text(text.replace(MARKER_PLACEHOLDER, str(marker_dir)))
            wheels[package] = build_wheel(copy, root / "wheels")
            installs[package] = root / "installs" / package
            install_wheel(wheels[package], installs[package])
        yield PluginInstalls(wheels, installs, marker_dir)
    finally:
        shutil.rmtree(marker_dir, ignore_errors=True)


@pytest.fixture
def markers(plugin_installs: PluginInstalls) -> Iterator[PluginInstalls]:
    """The installs, with no marker left from an earlier test (before and after)."""
    plugin_installs.clear_markers()
    yield plugin_installs
    plugin_installs.clear_markers()


def cli_argv(*args: str, before: Sequence[Path] = (), after: Sequence[Path] = ()) -> list[str]:
    """argv for the real CLI with `before` ahead of sys.path and `after` behind it."""
    return [
        sys.executable,
        "-c",
        _LAUNCH,
        json.dumps([str(p) for p in before]),
        json.dumps([str(p) for p in after]),
        *args,
    ]


def run_cli(
    *args: str,
    cwd: Path,
    before: Sequence[Path] = (),
    after: Sequence[Path] = (),
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI to completion (see `cli_argv`)."""
    return subprocess.run(
        cli_argv(*args, before=before, after=after),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=dict(os.environ),
    )
