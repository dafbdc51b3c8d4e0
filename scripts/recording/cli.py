"""Command line of the recorder: install the pinned CLIs, record cases, each in its own namespace.

`record` re-runs this module as `run-case` under `unshare --net`, several cases at a time;
`run-case` is the reusable unit (one CLI, one case) and refuses outside such a namespace.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from recording.cases import cases_for, find_case
from recording.clis import CLIS, REPO, install
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
    rec.add_argument("--cli", action="append", choices=sorted(CLIS), help="default: all four")
    rec.add_argument("--case", action="append", help="default: every case of each CLI")
    rec.add_argument("--jobs", type=int, default=6, help="cases recorded at once")
    one = sub.add_parser("run-case", help="one case, inside a loopback-only namespace")
    one.add_argument("--cli", required=True, choices=sorted(CLIS))
    one.add_argument("--case", required=True)
    one.add_argument("--out", type=Path, required=True)
    sub.add_parser("install", help="install the pinned CLIs under build/clis")
    args = parser.parse_args(argv)
    if args.command == "install":
        install(sorted(CLIS))
    elif args.command == "run-case":
        bring_up_loopback()
        assert_loopback_only()
        cli = CLIS[args.cli]
        if args.case == "help":
            record_help(cli, args.out)
        else:
            meta = run_case(cli, find_case(args.cli, args.case), args.out)
            print(f"{args.cli} {args.case}: exit {meta['exit_code']} ({meta['exit_cause']})")
    else:
        record(args.cli or sorted(CLIS), args.case, args.jobs)


def record(clis: list[str], cases: list[str] | None, jobs: int) -> None:
    reason = isolation_unavailable()
    if reason is not None:
        print(f"record-transcripts: skipped: {reason}", file=sys.stderr)
        raise SystemExit(0)
    if shutil.which("npm") is None and any(CLIS[c].registry == "npm" for c in clis):
        print(
            "record-transcripts: skipped: npm is not on PATH (apt-get install npm)", file=sys.stderr
        )
        raise SystemExit(0)
    install(clis)
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
