"""The sd_notify protocol (READY, STATUS, WATCHDOG, STOPPING), spoken directly over a datagram."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping


class Notifier:
    """Sends READY/STATUS/WATCHDOG/STOPPING to systemd when NOTIFY_SOCKET is set; else nothing."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        # "@name" is Linux's abstract namespace, spelled with a leading NUL byte on the wire.
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_interval_s = _watchdog_interval(env)
        self._sock: socket.socket | None = None
        self._last_status = ""

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, **fields: str | int) -> None:
        """One notification, e.g. `send(READY=1, STATUS="booted")`; failures are ignored."""
        if not self.enabled:
            return
        message = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            # MSG_DONTWAIT: a reader that stopped reading must never stall the supervisor.
            self._sock.sendto(message, socket.MSG_DONTWAIT, self.address)
        except OSError:
            # systemd gone or its queue full: the supervisor keeps supervising regardless.
            pass

    def status(self, text: str) -> None:
        """STATUS=, sent only when the text changed."""
        if text != self._last_status:
            self._last_status = text
            self.send(STATUS=text)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _watchdog_interval(env: Mapping[str, str]) -> float | None:
    """Half of WATCHDOG_USEC, in seconds, if the watchdog is meant for this process."""
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 2_000_000
