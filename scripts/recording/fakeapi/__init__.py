"""A fake provider API on 127.0.0.1: one HTTP server, one reply function per provider shape.

A provider module maps (case, request) to a `Reply`; the server logs every request it served,
so a recording can say how often and for how long the CLI retried on its own.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from recording.fakeapi.websocket import (
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    accept_key,
    frame,
    read_frame,
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or None


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    # Server-sent events, each one `data:` payload, sent after the headers.
    events: tuple[tuple[str | None, str], ...] = ()
    # Upgrade to a WebSocket and send `events` as text frames for each message received.
    websocket: bool = False


def json_reply(status: int, body: Any, *headers: tuple[str, str]) -> Reply:
    data = json.dumps(body).encode()
    return Reply(status, data, (("content-type", "application/json"), *headers))


def sse_reply(events: list[tuple[str | None, Any]], *headers: tuple[str, str]) -> Reply:
    # A str payload goes out as it is (OpenAI's closing "[DONE]").
    encoded = tuple(
        (name, payload if isinstance(payload, str) else json.dumps(payload))
        for name, payload in events
    )
    return Reply(200, b"", (("content-type", "text/event-stream"), *headers), encoded)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A CLI that gives up closes its connection mid-reply; that is its business.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


NOT_FOUND = json_reply(404, {"error": {"message": "not found", "type": "not_found"}})

Replier = Callable[[str, Request], Reply]


@dataclass
class FakeApi:
    """A threaded HTTP server answering with `replier(case, request)`; `log` lists what it saw."""

    replier: Replier
    case: str
    log: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                api._answer(self, "GET")

            def do_POST(self) -> None:
                api._answer(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = Request(
            method, handler.path, {k.lower(): v for k, v in handler.headers.items()}, body
        )
        reply = self.replier(self.case, request)
        self.log.append(
            {
                "t": round(time.time(), 3),
                "method": method,
                "path": handler.path,
                "status": reply.status,
            }
        )
        if reply.websocket:
            self._websocket(handler, reply)
            return
        handler.send_response(reply.status)
        for name, value in reply.headers:
            handler.send_header(name, value)
        if reply.events:
            handler.send_header("cache-control", "no-cache")
            handler.send_header("connection", "close")
            handler.end_headers()
            for chunk in _sse(reply.events):
                handler.wfile.write(chunk)
                handler.wfile.flush()
            handler.close_connection = True
            return
        handler.send_header("content-length", str(len(reply.body)))
        handler.end_headers()
        handler.wfile.write(reply.body)

    def _websocket(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        handler.send_response(101)
        handler.send_header("upgrade", "websocket")
        handler.send_header("connection", "Upgrade")
        handler.send_header(
            "sec-websocket-accept", accept_key(handler.headers["sec-websocket-key"])
        )
        handler.end_headers()
        handler.wfile.flush()
        handler.close_connection = True
        while (received := read_frame(handler.rfile)) is not None:
            opcode, payload = received
            if opcode == OP_CLOSE:
                handler.wfile.write(frame(OP_CLOSE, payload[:2]))
                return
            if opcode == OP_PING:
                handler.wfile.write(frame(OP_PONG, payload))
            elif opcode == OP_TEXT:
                self.log.append(
                    {
                        "t": round(time.time(), 3),
                        "method": "WS",
                        "path": handler.path,
                        "status": 200,
                    }
                )
                for _name, data in reply.events:
                    handler.wfile.write(frame(OP_TEXT, data.encode()))
            handler.wfile.flush()


def _sse(events: tuple[tuple[str | None, str], ...]) -> Iterator[bytes]:
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        yield f"{head}data: {data}\n\n".encode()
