"""Hooks that each reach for one thing a confined plugin must never get.

Every probe raises when it is refused (its hook_failed carries the errno) and returns
normally only if it got through. Targets come from `settings`.
"""

import ctypes
import os
import socket

from agent_runner.plugins import PluginManifest, RoundReport, SpawnDecision

PTRACE_ATTACH = 16


def ptrace_serve(view):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(PTRACE_ATTACH, int(view.settings["serve_pid"]), None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace refused")
    return SpawnDecision.skip("attached to serve")


def probe_tcp(view):
    with socket.create_connection(("127.0.0.1", int(view.settings["tcp_port"])), timeout=2):
        return RoundReport(events=[("reached", {"what": "tcp"})])


def probe_unix_socket(view):
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(view.settings["unix_socket"])
        return RoundReport(events=[("reached", {"what": "unix socket"})])


def probe_serve_environ(view):
    with open(f"/proc/{view.settings['serve_pid']}/environ", "rb") as environ:
        return RoundReport(events=[("reached", {"what": environ.read().decode("latin-1")})])


def probe_secret_file(view):
    with open(view.settings["secret_file"]) as secret:
        return RoundReport(events=[("reached", {"what": secret.read()})])


def probe_work_tree(view):
    with open(view.settings["work_file"]) as work:
        return RoundReport(events=[("reached", {"what": work.read()})])


def probe_write_outside(view):
    with open(os.path.join(view.settings["outside_dir"], "planted.txt"), "w") as planted:
        planted.write("escaped the scratch\n")
    return RoundReport(events=[("reached", {"what": "wrote outside"})])


def own_environment(view):
    return RoundReport(events=[("environ", {"variables": dict(os.environ)})])


PLUGIN = PluginManifest(
    name="prober_plugin",
    spawn_hooks=(ptrace_serve,),
    round_observers=(
        probe_tcp,
        probe_unix_socket,
        probe_serve_environ,
        probe_secret_file,
        probe_work_tree,
        probe_write_outside,
        own_environment,
    ),
    event_kinds=("reached", "environ"),
)
