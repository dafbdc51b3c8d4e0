"""The supervisor's memory during rounds: serve and every helper process it keeps, not the agent.

Prints peaks; asserts nothing. Usage: python benchmarks/bench_memory.py [rounds=3] [agent_s=2]
SPEC §11: supervisor RSS during a round <= 40 MB (this project aims at 25 MB for the tree).

The tree is serve plus its descendants other than the running agent and what the agent
started: the plugin fork server while one runs, the next rounds' gated children (prefork.py:
they hold nothing yet, but they exist only because the supervisor started them early, so they
count), and git while serve runs it. Sampled every SAMPLE_S from serve_start to its exit, so
boot, each round and the steps between rounds are all in the peak. Three measures:
- tree memory: distinct physical pages mapped by the tree, each counted once however many of
  its processes share it (from /proc/PID/pagemap: root only; elsewhere PSS stands in);
- tree PSS: each process's proportional share summed (pages shared with other programs on the
  host count in part, so it varies with what else runs);
- per process: the peak RSS (VmHWM) of serve and of the fork server.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_plugin_hooks import install_example, project

SAMPLE_S = 0.02
# What `pip install 'agent-runner[sandbox]'` brings. The dev tools of this venv stay out of
# serve's sight: import-linter pulls in rich, which structlog imports whenever it can (+4 MB).
RUNTIME = ("agent-runner", "click", "structlog", "tomli-w", "py-landlock", "pyseccomp")
# serve as `agent-runner serve` runs it, on only the folders given (no site-packages).
ISOLATED = """\
import json, sys
sys.path[:0] = json.loads(sys.argv[1])
sys.argv[:2] = ["agent-runner"]
from agent_runner.cli import main
main()
"""
PAGE = os.sysconf("SC_PAGE_SIZE")
_PRESENT = 1 << 63
_FRAME = (1 << 55) - 1


@dataclass
class Peaks:
    """The highest readings over one serve's life, in KiB; `tree` is None without pagemap."""

    tree: int | None = 0
    pss: int = 0
    serve_hwm: int = 0
    forkserver_hwm: int = 0
    helpers: dict[str, int] = field(default_factory=dict)  # role -> most seen at once
    samples: int = 0


def children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def role(pid: int) -> str | None:
    """What a process of serve's tree is: serve's own helper, or None for the agent's."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if b"gatekeeper.py" in cmdline:
        return "gated child"
    if b"forkserver" in cmdline:
        return "fork server"
    if os.path.basename(cmdline.split(b"\0", 1)[0]) == b"git":
        return "git"
    return None


def helpers(serve: int) -> dict[int, str]:
    """serve's helper processes by pid; the agent's subtree is left out (its own session)."""
    tree, todo = {}, [serve]
    while todo:
        for child in children(todo.pop()):
            kind = role(child)
            if kind is not None:
                tree[child] = kind
                if kind != "gated child":
                    todo.append(child)  # git's children, the fork server's confined calls
    return tree


def frames(pid: int) -> set[int]:
    """The physical frames `pid` has resident (empty without CAP_SYS_ADMIN)."""
    found: set[int] = set()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pm:
        for line in maps:
            if line.rstrip().endswith("[vsyscall]"):
                continue
            low, high = (int(x, 16) for x in line.split(maxsplit=1)[0].split("-"))
            pm.seek(low // PAGE * 8)
            for (entry,) in struct.iter_unpack("Q", pm.read((high - low) // PAGE * 8)):
                if entry & _PRESENT and entry & _FRAME:
                    found.add(entry & _FRAME)
    return found


def _kib(pid: int, path: str, key: str) -> int:
    for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def sample(serve: int, peaks: Peaks, exact: bool) -> None:
    tree = {serve: "serve", **helpers(serve)}
    pss, pages = 0, set()
    counts: dict[str, int] = {}
    for pid, kind in tree.items():
        try:
            pss += _kib(pid, "smaps_rollup", "Pss")
            if exact:
                pages |= frames(pid)
            hwm = _kib(pid, "status", "VmHWM")
        except OSError:
            continue  # it ended meanwhile
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "serve":
            peaks.serve_hwm = max(peaks.serve_hwm, hwm)
        elif kind == "fork server":
            peaks.forkserver_hwm = max(peaks.forkserver_hwm, hwm)
    peaks.pss = max(peaks.pss, pss)
    if exact and peaks.tree is not None:
        peaks.tree = max(peaks.tree, len(pages) * PAGE // 1024)
    for kind, count in counts.items():
        peaks.helpers[kind] = max(peaks.helpers.get(kind, 0), count)
    peaks.samples += 1


def pagemap_readable() -> bool:
    return bool(frames(os.getpid()))


def runtime_folder(root: Path) -> Path:
    """A folder holding (as symlinks) only agent-runner's runtime distributions."""
    folder = root / "runtime"
    folder.mkdir()
    for name in RUNTIME:
        dist = importlib.metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or ()} - {"..", "__pycache__"}
        for top in tops:
            source = Path(str(dist.locate_file(top)))
            if top.endswith(".pth"):
                continue  # an editable install's pointer: the package is linked below
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    import agent_runner  # noqa: PLC0415

    package = Path(agent_runner.__file__).parent
    if not (folder / "agent_runner").exists():
        (folder / "agent_runner").symlink_to(package)
    return folder


def serve_memory(site: Path | None, rounds: int = 3, agent_s: float = 2.0) -> Peaks:
    """Peaks of one serve of `rounds` rounds of a `sleep agent_s` agent in a git work tree;
    with `site`, the example plugin installed there is pinned and admitted."""
    exact = pagemap_readable()
    peaks = Peaks(tree=0 if exact else None)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = project(root, root / "stamps", site, ["sleep", str(agent_s)])
        path = json.dumps([str(p) for p in (site, runtime_folder(root)) if p is not None])
        serve_args = ["--max-rounds", str(rounds), "--config", str(config)]
        serve = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", ISOLATED, path, "serve", *serve_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        log_dir = root / "logs"
        while serve.poll() is None and not _started(log_dir):
            time.sleep(SAMPLE_S)
        while serve.poll() is None:
            try:
                sample(serve.pid, peaks, exact)
            except OSError:
                break  # serve is exiting
            time.sleep(SAMPLE_S)
        if serve.wait() != 0:
            raise SystemExit(f"serve exited with {serve.returncode}")
        admitted = sum(1 for e in _events(log_dir) if e["event"] == "plugin_admitted")
        if admitted != (site is not None):
            raise SystemExit(f"{admitted} plugins admitted")
    return peaks


def _events(log_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(log_dir.glob("events-*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def _started(log_dir: Path) -> bool:
    return any(e["event"] == "serve_start" for e in _events(log_dir)) if log_dir.exists() else False


def report(label: str, peaks: Peaks) -> str:
    tree = "n/a (no pagemap)" if peaks.tree is None else f"{peaks.tree / 1024:.1f} MB"
    helpers = ", ".join(f"{n} {kind}" for kind, n in sorted(peaks.helpers.items()))
    line = (
        f"{label:<22} tree {tree:>8}  tree PSS {peaks.pss / 1024:5.1f} MB  "
        f"serve peak RSS {peaks.serve_hwm / 1024:5.1f} MB"
    )
    if peaks.forkserver_hwm:
        line += f"  fork server peak RSS {peaks.forkserver_hwm / 1024:5.1f} MB"
    return line + f"\n{'':<22} at most: {helpers}; {peaks.samples} samples"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    agent_s = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    print(f"supervisor memory over {rounds} rounds of a {agent_s:g} s agent (target <= 40 MB)")
    print(report("no third-party plugin", serve_memory(None, rounds, agent_s)))
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        install_example(site)
        print(report("the example plugin", serve_memory(site, rounds, agent_s)))


if __name__ == "__main__":
    main()
