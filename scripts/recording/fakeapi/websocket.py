"""Just enough RFC 6455 for the Responses API over a WebSocket: accept, read frames, send text.

codex opens `GET /v1/responses` with `Upgrade: websocket` first and falls back to HTTPS only
when that fails; a fake that refuses the upgrade would record codex's fallback, not its run.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import BinaryIO

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_TEXT, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x8, 0x9, 0xA


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def read_frame(stream: BinaryIO) -> tuple[int, bytes] | None:
    """(opcode, payload) of the next frame from the client, or None at end of stream."""
    head = stream.read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        length = struct.unpack("!H", stream.read(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", stream.read(8))[0]
    mask = stream.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = stream.read(length)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, final frame (servers never mask)."""
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, length)
    return head + payload
