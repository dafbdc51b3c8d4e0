"""The agent presets shipped as data (`<name>.toml`), listed without importing the config."""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).parent


def preset_names() -> list[str]:
    """Names of the presets shipped inside the package."""
    return sorted(path.stem for path in FOLDER.glob("*.toml"))
