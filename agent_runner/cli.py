"""The `agent-runner` command line; the only place errors become exit codes.

Subcommands import their modules lazily so `--help` and `--version` stay fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agent_runner import __version__
from agent_runner.errors import AgentRunnerError, ExitCode
from agent_runner.presets import preset_names

if TYPE_CHECKING:
    from agent_runner.config import Config
    from agent_runner.observe.contracts import Document
    from agent_runner.systemd.unit import Scope

F = TypeVar("F", bound=Callable[..., Any])


def config_option(func: F) -> F:
    """`--config PATH` on every command (default: agent-runner.toml found upward)."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path),  # a directory is refused with exit 78 by the loader
        default=None,
        help="Config file (default: agent-runner.toml here or in a parent folder).",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(func)


def load(config_path: Path | None) -> Config:
    from agent_runner.config import load_config

    return load_config(config_path)


def print_json(document: Document) -> None:
    """A command's --json document (docs/json.md), keys in schema order."""
    import json

    from agent_runner.observe.contracts import to_json

    click.echo(json.dumps(to_json(document), indent=2, ensure_ascii=False, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="agent-runner")
def cli() -> None:
    """Restart-on-exit supervisor for autonomous coding agents."""


@cli.command()
@click.option(
    "--preset",
    type=click.Choice(preset_names()),
    default="claude",
    show_default=True,
    help="Agent preset.",
)
@click.option("--force", is_flag=True, help="Overwrite an existing agent-runner.toml.")
@config_option
def init(preset: str, force: bool, config_path: Path | None) -> None:
    """Write agent-runner.toml and prompts/main.md."""
    from agent_runner.scaffold import write_project

    target = config_path or Path("agent-runner.toml")
    for path in write_project(target.absolute(), preset=preset, force=force):
        click.echo(f"wrote {path}")


@cli.command()
@click.option("--once", is_flag=True, help="Run one round, then exit.")
@click.option("--max-rounds", type=click.IntRange(min=1), default=None, help="Stop after N rounds.")
@config_option
def serve(once: bool, max_rounds: int | None, config_path: Path | None) -> None:
    """Run rounds forever (what systemd runs)."""
    from agent_runner.supervisor.loop.serve import run_serve

    raise SystemExit(run_serve(load(config_path), max_rounds=1 if once else max_rounds))


@cli.command(name="round")
@config_option
def round_command(config_path: Path | None) -> None:
    """Run exactly one round in the foreground."""
    from agent_runner.supervisor.loop.serve import run_serve

    raise SystemExit(run_serve(load(config_path), max_rounds=1))


@cli.command()
@json_option
@click.option(
    "--select",
    metavar="PATH",
    default=None,
    help="Print one value of the --json document by dotted path, e.g. supervisor.state or "
    "last_rounds.0.exit_cause (exit 2 naming the first key that is not there).",
)
@click.option(
    "--events",
    "event_count",
    type=click.IntRange(0, 10_000),
    default=10,
    show_default=True,
    help="How many of the latest events to include (0: none).",
)
@config_option
def peek(as_json: bool, select: str | None, event_count: int, config_path: Path | None) -> None:
    """Snapshot of the project from state.json and the event log; read-only."""
    from agent_runner.observe.contracts import to_json
    from agent_runner.observe.peek import select_path, snapshot

    doc = snapshot(load(config_path), events=event_count)
    if select:
        import json

        value = select_path(to_json(doc), select)
        click.echo(
            json.dumps(value, ensure_ascii=False)
            if as_json or not isinstance(value, str)
            else value
        )
    elif as_json:
        print_json(doc)
    else:
        from agent_runner.observe.render import render_peek  # not on --json's fast path

        click.echo(render_peek(doc))


@cli.command()
@click.option("--kind", "kinds", multiple=True, help="Only this kind (repeatable).")
@click.option("--round", "round_no", type=int, default=None, help="Only events of this round.")
@click.option("--since", default=None, help="Only newer events: 10m, 2h, 1d or an ISO time.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events.")
@json_option
@config_option
def events(
    kinds: tuple[str, ...],
    round_no: int | None,
    since: str | None,
    follow: bool,
    as_json: bool,
    config_path: Path | None,
) -> None:
    """Query or follow the event log."""
    from agent_runner.observe.eventquery import (
        EventFilter,
        check_kinds,
        format_event,
        json_line,
        query,
    )

    config = load(config_path)
    check_kinds(kinds, config.runtime.log_dir)
    wanted = EventFilter.build(kinds=kinds, round_no=round_no, since=since)
    for event in query(config.runtime.log_dir, wanted, follow=follow):
        click.echo(json_line(event) if as_json else format_event(event))


@cli.command()
@json_option
@click.option(
    "--all", "every", is_flag=True, help="Every project on this host, from its state files."
)
@config_option
def status(as_json: bool, every: bool, config_path: Path | None) -> None:
    """Is serve running, and since when; exit 0 when it is, 3 when it is not.

    With --all: every project on this host, from its state files (exit 0).
    """
    if every:
        from agent_runner.observe.host import host_report, render_host

        host = host_report()
        if as_json:
            print_json(host)
        else:
            click.echo(render_host(host))
        return
    from agent_runner.observe.contracts import ALIVE_STATES
    from agent_runner.observe.peek import status_document
    from agent_runner.systemd.state import unit_state

    config = load(config_path)
    doc = status_document(config, unit_state(config))
    if as_json:
        print_json(doc)
    else:
        from agent_runner.observe.render import render_status  # not on --json's fast path

        click.echo(render_status(doc))
    if doc.supervisor.state not in ALIVE_STATES:
        raise SystemExit(ExitCode.NOT_RUNNING)


@cli.command()
@click.option("--after-round", is_flag=True, help="Let the current round finish first.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait.")
@json_option
@config_option
def stop(after_round: bool, timeout: float, as_json: bool, config_path: Path | None) -> None:
    """Ask the running serve to stop; exit 1 if it still runs at the timeout.

    With --after-round, exit 0 as soon as serve has agreed to stop after its round.
    """
    from agent_runner.commands.stop import request_stop
    from agent_runner.observe.contracts import StopDocument

    done = request_stop(load(config_path), after_round=after_round, timeout_s=timeout)
    if as_json:
        print_json(
            StopDocument(
                outcome=done.outcome, pid=done.pid, waited_s=done.waited_s, detail=done.detail
            )
        )
    else:
        click.echo(done.detail, err=done.outcome == "timeout")
    if done.outcome == "timeout":
        raise SystemExit(ExitCode.FAILURE)


@cli.command()
@json_option
@config_option
def doctor(as_json: bool, config_path: Path | None) -> None:
    """Pre-flight checks, each ok / warn / FAIL with a fix; exit 1 when any fails."""
    from agent_runner.observe.doctor import diagnose, failed, render_checks

    found = diagnose(config_path)
    if as_json:
        print_json(found.document())
    else:
        click.echo(render_checks(found.checks))
    if not found.config_loaded:
        raise SystemExit(ExitCode.CONFIG)
    if failed(found.checks):
        raise SystemExit(ExitCode.FAILURE)


@cli.command()
def demo() -> None:
    """Three rounds of a bundled demo agent in a throwaway repo; no API key needed."""
    from agent_runner.demo import run_demo

    raise SystemExit(run_demo(echo=click.echo))


def system_option(func: F) -> F:
    return click.option(
        "--system",
        "system_wide",
        is_flag=True,
        help="The system manager (/etc/systemd/system; needs root) instead of your user's.",
    )(func)


def dry_run_option(func: F) -> F:
    return click.option(
        "--dry-run", is_flag=True, help="Print the files and the commands; change nothing."
    )(func)


@cli.command()
@system_option
@click.option(
    "--user",
    "run_as",
    metavar="NAME",
    default=None,
    help="With --system: the account that runs the project (default: the sudo caller).",
)
@dry_run_option
@click.option("--now", is_flag=True, help="Also start it now.")
@click.option(
    "--force",
    is_flag=True,
    help="Install even if doctor checks fail, or over a template agent-runner did not write.",
)
@config_option
def install(
    system_wide: bool,
    run_as: str | None,
    dry_run: bool,
    now: bool,
    force: bool,
    config_path: Path | None,
) -> None:
    """Install and enable this project's unit, agent-runner@<folder>.service."""
    from agent_runner.errors import SystemdError
    from agent_runner.observe.doctor import diagnose, failed, render_checks
    from agent_runner.systemd.install import Layout, apply_plan, plan_install, service_account
    from agent_runner.systemd.systemctl import Systemctl, check_manager

    if run_as is not None and not system_wide:
        raise click.UsageError("--user NAME goes with --system (a user unit runs as you)")
    config = load(config_path)
    scope: Scope = "system" if system_wide else "user"
    account = service_account(run_as) if system_wide else None
    plan = plan_install(
        config, scope, Layout.for_scope(scope), account=account, now=now, force=force
    )
    failures = [] if force else failed(diagnose(config.path).checks)
    if dry_run:
        click.echo(plan.render())
    if failures:
        click.echo(render_checks(failures), err=True)
        raise SystemdError(
            f"install refused: {len(failures)} doctor check(s) failed; fix them or pass --force"
        )
    if dry_run:
        return
    check_manager(scope)
    was_running = now and Systemctl(scope).query("is-active", plan.unit) == "active"
    for line in apply_plan(plan):
        click.echo(line)
    for note in plan.notes:
        click.echo(note)
    if was_running:
        flag = "--user " if scope == "user" else ""
        click.echo(f"it was already running: `systemctl {flag}restart {plan.unit}` applies this")


@cli.command()
@system_option
@dry_run_option
@config_option
def uninstall(system_wide: bool, dry_run: bool, config_path: Path | None) -> None:
    """Stop, disable and remove this project's unit (and the template after the last one)."""
    from agent_runner.config import find_config
    from agent_runner.systemd.install import Layout, apply_plan, plan_uninstall, project_dir
    from agent_runner.systemd.systemctl import check_manager

    scope: Scope = "system" if system_wide else "user"
    # The config is not loaded: a project whose config is broken or gone can still be removed.
    folder = project_dir(config_path or find_config())
    plan = plan_uninstall(folder, scope, Layout.for_scope(scope))
    if dry_run:
        click.echo(plan.render())
        return
    check_manager(scope)
    for line in apply_plan(plan):
        click.echo(line)
    for note in plan.notes:
        click.echo(note)


@cli.group(invoke_without_command=True)
@json_option
@config_option
@click.pass_context
def rescue(ctx: click.Context, as_json: bool, config_path: Path | None) -> None:
    """Work serve secured (stashes, auto-commits): list it; `apply` or `branch` one."""
    if ctx.invoked_subcommand is not None:
        return
    from agent_runner.commands.rescue import render_secured, secured_work
    from agent_runner.observe.contracts import RescueDocument, RescueEntry

    config = load(config_path)
    entries = secured_work(config)
    if as_json:
        print_json(RescueDocument(secured=[RescueEntry(**entry.to_dict()) for entry in entries]))
    else:
        click.echo(render_secured(entries, config.runtime.work_dir))


@rescue.command(name="apply")
@click.argument("sha")
@config_option
def rescue_apply(sha: str, config_path: Path | None) -> None:
    """Put SHA's work back into the work tree (only a clean one; overwrites nothing)."""
    from agent_runner.commands.rescue import apply_work

    config = load(config_path)
    entry = apply_work(config, sha)
    click.echo(
        f"applied round {entry.round}'s {entry.action} {entry.sha[:12]} to"
        f" {config.runtime.work_dir}; `git status` shows it"
    )


@rescue.command(name="branch")
@click.argument("sha")
@click.argument("name")
@config_option
def rescue_branch(sha: str, name: str, config_path: Path | None) -> None:
    """Make a new branch NAME holding SHA's work; the tree and HEAD stay as they are."""
    from agent_runner.commands.rescue import branch_work

    entry = branch_work(load(config_path), sha, name)
    click.echo(
        f"branch {name} holds round {entry.round}'s {entry.action} {entry.sha[:12]};"
        f" `git switch {name}` to work on it"
    )


@cli.group()
def plugins() -> None:
    """Discovered plugins, their provenance and pins."""


@plugins.command(name="list")
@json_option
@config_option
def plugins_list(as_json: bool, config_path: Path | None) -> None:
    """Show discovered plugins: provenance, pin state, digest, what serve admitted."""
    from agent_runner.observe.contracts import PluginsDocument
    from agent_runner.observe.pluginlist import plugin_rows, render_rows

    rows = plugin_rows(load(config_path))
    if as_json:
        print_json(PluginsDocument(plugins=rows))
    else:
        click.echo(render_rows(rows))


@plugins.command(name="pin")
@click.argument("name")
@config_option
def plugins_pin(name: str, config_path: Path | None) -> None:
    """Write NAME's current digest into [plugins.pin] (one line; the rest is kept as is)."""
    from agent_runner.plugins.admission.discovery import installed
    from agent_runner.plugins.admission.pinning import pin_plugin
    from agent_runner.plugins.admission.trust import running_package

    config = load(config_path)
    candidates = installed(config.runtime.work_dir)
    pins = dict(config.plugins.pin)
    result = pin_plugin(config.path, pins, name, candidates, running_package())
    if not result.written:
        click.echo(f"{name} is already pinned to {result.digest} in {result.path}")
    elif result.previous:
        click.echo(f"pinned {name} = {result.digest} in {result.path} (was {result.previous})")
    else:
        click.echo(f"pinned {name} = {result.digest} in {result.path}")


def run(args: list[str] | None = None) -> int:
    """Run the CLI and turn every error into its one-line message and exit code."""
    try:
        result = cli.main(args, standalone_mode=False, prog_name="agent-runner")
    except (click.exceptions.Abort, KeyboardInterrupt):
        # Only where the caller kept Python's SIGINT handler (the script resets it, see
        # __main__.py): click turns Ctrl-C into Abort, which is no failure.
        click.echo("agent-runner: interrupted", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except AgentRunnerError as exc:
        click.echo(f"agent-runner: {exc}", err=True)
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else ExitCode.FAILURE
    except Exception as exc:
        if os.environ.get("AGENT_RUNNER_DEBUG"):
            raise
        click.echo(
            f"agent-runner: internal error: {type(exc).__name__}: {exc} "
            "(set AGENT_RUNNER_DEBUG=1 for the traceback)",
            err=True,
        )
        return ExitCode.FAILURE
    return result if isinstance(result, int) else ExitCode.OK


def main() -> None:
    """Run the CLI and exit with its code (the script's entry point is __main__.main)."""
    for stream in (sys.stdout, sys.stderr):
        # Text read from files anyone can write (events, state, paths) may hold lone
        # surrogates: printing them must show an escape, never raise.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    sys.exit(run())
