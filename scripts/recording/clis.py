"""The four CLIs at pinned versions: where they install, and the environment each records in.

Every run points the CLI at the fake API and turns telemetry, error reporting and update
checks off; nothing else differs from the preset.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from recording.cases import Case
from recording.fakeapi import anthropic, gemini, openai

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build" / "clis"
NPM_PREFIX = BUILD / "npm"
AIDER_VENV = BUILD / "aider-venv"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

FAKE_ANTHROPIC_KEY = "sk-ant-api03-recording-fake-key"
FAKE_OAUTH_TOKEN = "sk-ant-oat01-recording-fake-token"
FAKE_OPENAI_KEY = "sk-recording-fake-key"
FAKE_GEMINI_KEY = "AIzaRecordingFakeKey000000000000000000"


@dataclass(frozen=True)
class Cli:
    name: str  # the preset's name
    registry: str  # "npm" | "pypi"
    package: str
    version: str
    binary: Path
    provider: ModuleType
    help_args: tuple[str, ...]  # the help of the command the preset runs
    setup: Callable[[Path, str, Case], dict[str, str]]  # (home, base_url, case) -> env


def _claude(home: Path, base_url: str, case: Case) -> dict[str, str]:
    auth = (
        {"CLAUDE_CODE_OAUTH_TOKEN": FAKE_OAUTH_TOKEN}
        if case.oauth
        else {"ANTHROPIC_API_KEY": FAKE_ANTHROPIC_KEY}
    )
    return {
        **auth,
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def _codex(home: Path, base_url: str, case: Case) -> dict[str, str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f'openai_base_url = "{base_url}/v1"\n'
        "check_for_update_on_startup = false\n"
        "\n[analytics]\nenabled = false\n"
        "\n[feedback]\nenabled = false\n"
    )
    return {"CODEX_HOME": str(codex_home), "CODEX_API_KEY": FAKE_OPENAI_KEY}


def _gemini(home: Path, base_url: str, case: Case) -> dict[str, str]:
    settings: dict[str, object] = {
        "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    if case.skip_setup != "auth_type":
        # With GOOGLE_GEMINI_BASE_URL set, gemini infers the "gateway" auth type, which its own
        # validation then refuses: the API-key type has to be configured.
        settings["security"] = {"auth": {"selectedType": "gemini-api-key"}}
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(settings, indent=2))
    return {"GOOGLE_GEMINI_BASE_URL": base_url, "GEMINI_API_KEY": FAKE_GEMINI_KEY}


def _aider(home: Path, base_url: str, case: Case) -> dict[str, str]:
    return {"OPENAI_API_BASE": f"{base_url}/v1", "OPENAI_API_KEY": FAKE_OPENAI_KEY}


_BIN = NPM_PREFIX / "node_modules" / ".bin"
CLIS: dict[str, Cli] = {
    "claude": Cli(
        "claude", "npm", "@anthropic-ai/claude-code", "2.1.332", _BIN / "claude",
        anthropic, ("--help",), _claude,
    ),
    "codex": Cli(
        "codex", "npm", "@openai/codex", "0.171.0", _BIN / "codex",
        openai, ("exec", "--help"), _codex,
    ),
    "gemini": Cli(
        "gemini", "npm", "@google/gemini-cli", "0.61.0", _BIN / "gemini",
        gemini, ("--help",), _gemini,
    ),
    "aider": Cli(
        "aider", "pypi", "aider-chat", "0.86.2", AIDER_VENV / "bin" / "aider",
        openai, ("--help",), _aider,
    ),
}  # fmt: skip


def search_path() -> str:
    """PATH for a recorded run: the pinned CLIs first, then the system."""
    return f"{_BIN}:{AIDER_VENV / 'bin'}:{SYSTEM_PATH}"


def install(names: list[str]) -> None:
    """Install the pinned versions of `names` under build/clis (a no-op when already there)."""
    npm = [f"{CLIS[n].package}@{CLIS[n].version}" for n in names if CLIS[n].registry == "npm"]
    if npm and not all(_installed(CLIS[n]) for n in names if CLIS[n].registry == "npm"):
        NPM_PREFIX.mkdir(parents=True, exist_ok=True)
        package_json = NPM_PREFIX / "package.json"
        if not package_json.exists():
            package_json.write_text('{"private": true}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--save-exact", *npm],
            cwd=NPM_PREFIX,
            check=True,
        )
    if "aider" in names and not _installed(CLIS["aider"]):
        if not (AIDER_VENV / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(AIDER_VENV)], check=True)
        pip = [str(AIDER_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, f"aider-chat=={CLIS['aider'].version}"], check=True)


def _installed(cli: Cli) -> bool:
    if cli.registry == "npm":
        manifest = NPM_PREFIX / "node_modules" / cli.package / "package.json"
        if not manifest.exists():
            return False
        return json.loads(manifest.read_text()).get("version") == cli.version
    return cli.binary.exists() and bool(
        list((AIDER_VENV / "lib").glob(f"python*/site-packages/aider_chat-{cli.version}.dist-info"))
    )
