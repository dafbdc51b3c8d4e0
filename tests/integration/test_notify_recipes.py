"""The [notify] recipes of docs/operations.md, run as written through a real serve that gives
up: curl and jq for real against an HTTP server on 127.0.0.1, recording stand-ins for
notify-send and mail (a desktop session and a mail server are not part of the suite)."""

from __future__ import annotations

import json
import os
import re
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Project, agent

DOCS = Path(__file__).parents[2] / "docs" / "operations.md"
NTFY_URL = "https://ntfy.sh/my-agent-runner-topic"


def recipes() -> dict[str, dict[str, Any]]:
    section = DOCS.read_text().split("## Notifications", 1)[1].split("\n## ", 1)[0]
    found = {}
    for block in re.findall(r"```toml\n(.*?)```", section, re.S):
        table = tomllib.loads(block)["notify"]
        command = " ".join(table["command"])
        name = next(
            (n for n in ("notify-send", "curl", "mail") if re.search(rf"\b{n}\b", command)), None
        )
        if name == "curl":
            name = "slack" if "SLACK_WEBHOOK_URL" in command else "ntfy"
        if name is not None:
            found[name] = table
    assert sorted(found) == ["mail", "notify-send", "ntfy", "slack"]
    return found


@pytest.fixture
def http_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"path": self.path, "headers": dict(self.headers), "body": body})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()
    server.server_close()


def give_up(project: Project, notify: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    project.write_config(
        agent("exits_with.py", "1"), breakers={"crash_loop_rounds": 1}, notify=notify
    )
    done = project.cli("serve", env=env)
    assert done.returncode == 69, done.stderr
    assert project.events("notify_failed") == []
    [event] = project.events("crash_loop")
    return event


def line_of(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n"


def test_the_ntfy_recipe_posts_the_event(
    project: Project, http_server: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = http_server
    table = recipes()["ntfy"]
    table["command"] = [part.replace(NTFY_URL, f"{url}/my-topic") for part in table["command"]]
    event = give_up(project, table, {})
    [request] = received
    assert request["path"] == "/my-topic"
    assert request["headers"]["Title"] == "agent-runner crash_loop"
    assert request["body"].decode() == line_of(event)


def test_the_slack_recipe_posts_a_text_message(
    project: Project, http_server: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = http_server
    event = give_up(project, recipes()["slack"], {"SLACK_WEBHOOK_URL": f"{url}/hook"})
    [request] = received
    assert request["headers"]["Content-Type"] == "application/json"
    text = json.loads(request["body"])["text"]
    assert text == f"agent-runner crash_loop in {project.work_dir}: {event['reason']}"


@pytest.mark.parametrize("program", ["notify-send", "mail"])
def test_the_desktop_and_mail_recipes_call_their_program_as_written(
    project: Project, tmp_path: Path, program: str
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record.json"
    stand_in = bin_dir / program
    stand_in.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'stdin': sys.stdin.read()}}, open({str(record)!r}, 'w'))\n"
    )
    stand_in.chmod(0o755)
    event = give_up(project, recipes()[program], {"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    got = json.loads(record.read_text())
    work = str(project.work_dir)
    if program == "notify-send":
        assert got["argv"] == ["-u", "critical", "agent-runner: crash_loop", work]
    else:
        assert got["argv"] == ["-s", f"agent-runner: crash_loop in {work}", "me@example.com"]
        assert got["stdin"] == line_of(event)
