"""Command line of the recorder: install the pinned CLIs, record cases, each in its own namespace.

`record` re-runs this module as `run-case` under `unshare --net`, one case at a time unless
`--jobs` says otherwise (under load a CLI's timing changes what it prints: codex's usage-limit
case came out as a bare 429 with six cases at once); `run-case` is the reusable unit (one CLI,
one case) and refuses outside such a namespace.
`confined` runs each CLI's success case with `[agent] confine = "workdir"` the same way
(into a scratch folder, not the fixtures) and fails unless every one still succeeds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agent_runner.parsers import parse_transcript
from recording.cases import cases_for, find_case
from recording.clis import CLIS, REPO, install, installed_versions
from recording.netns import (
    assert_loopback_only,
    bring_up_loopback,
    in_namespace_argv,
    isolation_unavailable,
)
from recording.run import record_help, run_case

OUT = REPO / "tests" / "fixtures" / "transcripts" / "real"


def out_dir(cli: str) -> Path:
    return OUT / f"{cli}-{CLIS[cli].version}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="record-transcripts", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="install the pinned CLIs and record their cases")
    rec.add_argument("--cli", action="append", choices=sorted(CLIS), help="default: all of them")
    rec.add_argument("--case", action="append", help="default: every case of each CLI")
    rec.add_argument(
        "--jobs", type=int, default=1, help="cases recorded at once (default 1: each alone)"
    )
    one = sub.add_parser("run-case", help="one case, inside a loopback-only namespace")
    one.add_argument("--cli", required=True, choices=sorted(CLIS))
    one.add_argument("--case", required=True)
    one.add_argument("--out", type=Path, required=True)
    one.add_argument("--confine", help="[agent] confine for the round (default: the preset's)")
    conf = sub.add_parser("confined", help='each success case under confine = "workdir"')
    conf.add_argument("--cli", action="append", choices=sorted(CLIS), help="default: all of them")
    sub.add_parser("install", help="install the pinned CLIs under build/clis")
    args = parser.parse_args(argv)
    if args.command == "install":
        install(sorted(CLIS))
        _say_versions(sorted(CLIS))
    elif args.command == "run-case":
        bring_up_loopback()
        assert_loopback_only()
        cli = CLIS[args.cli]
        if args.case == "help":
            record_help(cli, args.out)
        else:
            overrides = {"confine": args.confine} if args.confine else None
            meta = run_case(
                cli, find_case(args.cli, args.case), args.out, agent_overrides=overrides
            )
            print(f"{args.cli} {args.case}: exit {meta['exit_code']} ({meta['exit_cause']})")
    elif args.command == "confined":
        confined(args.cli or sorted(CLIS))
    else:
        record(args.cli or sorted(CLIS), args.case, args.jobs)


def record(clis: list[str], cases: list[str] | None, jobs: int) -> None:
    _install_or_exit(clis, code=0)
    work = [
        (cli, name)
        for cli in clis
        for name in ["help", *(c.name for c in cases_for(cli))]
        if cases is None or name in cases
    ]

    def one(item: tuple[str, str]) -> int:
        cli, name = item
        argv = [sys.executable, "-m", "recording", "run-case", "--cli", cli, "--case", name]
        done = subprocess.run(
            in_namespace_argv([*argv, "--out", str(out_dir(cli))]),
            cwd=REPO / "scripts",
            check=False,
        )
        if done.returncode != 0:
            print(
                f"record-transcripts: {cli} {name} failed (exit {done.returncode})", file=sys.stderr
            )
        return done.returncode

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        failures = sum(1 for code in pool.map(one, work) if code != 0)
    raise SystemExit(1 if failures else 0)


def confined(clis: list[str]) -> None:
    """Each CLI's success case, confined: exit 0, a clean round, and a transcript of success."""
    _install_or_exit(clis, code=1)  # asked for explicitly: not running it is no success
    with tempfile.TemporaryDirectory(prefix="agent-runner-confined-") as scratch:

        def one(cli: str) -> str | None:
            out = Path(scratch) / cli
            argv = [sys.executable, "-m", "recording", "run-case", "--cli", cli, "--case"]
            argv += ["success", "--out", str(out), "--confine", "workdir"]
            done = subprocess.run(
                in_namespace_argv(argv), cwd=REPO / "scripts", capture_output=True, check=False
            )
            if done.returncode != 0:
                return f"the run failed (exit {done.returncode}): {done.stderr[-300:]!r}"
            return _confined_success(cli, out)

        with ThreadPoolExecutor(max_workers=len(clis)) as pool:
            problems = dict(zip(clis, pool.map(one, clis), strict=True))
    for cli, problem in problems.items():
        print(f"{cli} {CLIS[cli].version}: " + (problem or 'succeeds under confine = "workdir"'))
    raise SystemExit(1 if any(problems.values()) else 0)


def _confined_success(cli: str, out: Path) -> str | None:
    """Why the confined success case did not succeed, or None."""
    meta = json.loads((out / "success.json").read_text())
    if meta.get("confined") is not True:
        return "the round was not confined"
    if (meta["exit_code"], meta["exit_cause"]) != (0, "clean"):
        return f"exit {meta['exit_code']} ({meta['exit_cause']})"
    if not meta["requests"]["count"]:
        return "it never reached the (fake) API"
    found = parse_transcript(cli, out / "success.log", now=meta["recorded_at"], exit_cause="clean")
    if found.transient or found.auth_error or found.setup_error:
        return f"its transcript reports a failure: {found}"
    return None


def _install_or_exit(clis: list[str], *, code: int) -> None:
    """Install the pinned CLIs; exit `code` with the reason where this host cannot run them."""
    reason = isolation_unavailable()
    if (
        reason is None
        and shutil.which("npm") is None
        and any(CLIS[c].registry == "npm" for c in clis)
    ):
        reason = "npm is not on PATH (apt-get install npm)"
    if reason is not None:
        print(f"record-transcripts: skipped: {reason}", file=sys.stderr)
        raise SystemExit(code)
    install(clis)
    _say_versions(clis)


def _say_versions(clis: list[str]) -> None:
    """Which versions are installed: what the recordings that follow were made with."""
    for line in installed_versions(clis):
        print(f"record-transcripts: {line}", flush=True)
