"""Where the confined agent may write, and whether this kernel can confine it (pure).

`[agent] confine = "workdir"`: writes only beneath the work tree, the transcripts folder, the
round's TMPDIR, a few devices, the preset's state folders and `[agent] writable`; reads,
execution and the network are left as they are. confinement.py applies what this decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agent_runner.config import Config
from agent_runner.supervisor.agent import landlock

TMP_FOLDER = "agent-tmp"
# Devices every program may write; /dev/pts for terminals a tool opens, /dev/shm for POSIX
# shared memory and semaphores (Python's multiprocessing, browsers).
DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",  # noqa: S108 -- a path the agent may write, not a temporary file of ours
)


@dataclass(frozen=True)
class WriteRule:
    """One path the agent may write beneath, why, and whether serve creates it when missing."""

    path: Path
    why: Literal["work tree", "transcripts", "TMPDIR", "device", "writable"]
    create: bool = False


@dataclass(frozen=True)
class Verdict:
    """What `[agent] confine` means on this kernel: confine, run unconfined, or refuse to boot."""

    action: Literal["confine", "unconfined", "refuse"]
    reason: str = ""


def tmp_root(log_dir: Path) -> Path:
    """The folder holding each round's TMPDIR."""
    return log_dir / TMP_FOLDER


def round_tmpdir(log_dir: Path, number: int) -> Path:
    """Round `number`'s TMPDIR, removed once the round is over."""
    return tmp_root(log_dir) / f"round-{number:06d}"


def verdict(mode: str, abi: int) -> Verdict:
    """`[agent] confine` against the kernel's Landlock ABI (0: none)."""
    if mode == "off":
        return Verdict("unconfined", 'agent.confine is "off"')
    if abi >= 1:
        return Verdict("confine")
    reason = "this kernel offers no Landlock (Linux >= 5.13 built with it, and enabled)"
    return Verdict("refuse" if mode == "workdir" else "unconfined", reason)


def write_rules(config: Config) -> tuple[WriteRule, ...]:
    """Every path the agent may write beneath, in the order they are reported."""
    log_dir = config.runtime.log_dir
    rules = [
        WriteRule(config.runtime.work_dir, "work tree"),
        WriteRule(log_dir / "rounds", "transcripts", create=True),
        WriteRule(tmp_root(log_dir), "TMPDIR", create=True),
        *(WriteRule(Path(device), "device") for device in DEVICES),
        *(WriteRule(w.path, "writable", create=w.create) for w in config.agent.writable),
    ]
    return tuple(rules)


def granted_rights(abi: int) -> int:
    """The rights a rule grants: every write the ABI handles but making device nodes."""
    return landlock.write_rights(abi) & ~landlock.DEVICE_NODES


def exposed_inputs(config: Config) -> list[Path]:
    """The supervisor's own files the confined agent could still write (beneath a rule)."""
    inputs = [config.path, config.runtime.log_dir / "state.json"]
    rules = write_rules(config)
    return [path for path in inputs if any(path.is_relative_to(r.path) for r in rules)]
