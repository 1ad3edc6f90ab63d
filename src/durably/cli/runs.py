"""`durably start | signal | cancel | runs | show`."""

from __future__ import annotations

import json
from typing import Any

import typer

from ..client import documents
from ..client.durably import Durably
from ..core.attributes import matches, parse_attributes
from ..core.durations import parse_instant
from ..core.errors import ConfigurationError, InvalidInput
from ..store.models import STATUSES
from . import _render
from ._common import fail, options, parse_json, print_json, run
from ._progress import wait_with_progress


def register(app: typer.Typer) -> None:
    app.command()(start)
    app.command()(signal)
    app.command()(cancel)
    app.command(name="runs")(list_runs)
    app.command()(show)
    app.command()(schedules)


def _instant(value: str | None, option: str) -> Any:
    if value is None:
        return None
    try:
        return parse_instant(value)
    except ConfigurationError as exc:
        fail(f"{option}: {exc}", 2)


def _attributes(texts: list[str] | None) -> dict[str, Any] | None:
    try:
        return parse_attributes(texts)
    except InvalidInput as exc:
        fail(str(exc), 2)


def start(
    ctx: typer.Context,
    workflow: str = typer.Argument(..., help="the workflow's name"),
    input_text: str | None = typer.Option(None, "--input", help="JSON, or @file"),
    version: str | None = typer.Option(None, "--version", help="default: newest registered"),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key"),
    available_at: str | None = typer.Option(None, "--available-at", help="ISO time or +5s"),
    deadline_at: str | None = typer.Option(None, "--deadline-at", help="ISO time or +1h"),
    concurrency_key: str | None = typer.Option(
        None, "--concurrency-key", help="the queue's per_key limit groups by it"
    ),
    priority: int = typer.Option(0, "--priority", help="larger is claimed first (queues)"),
    debounce: str | None = typer.Option(
        None, "--debounce", help="e.g. 5s: join the pending run of --debounce-key's window"
    ),
    debounce_key: str | None = typer.Option(None, "--debounce-key"),
    debounce_max: str | None = typer.Option(
        None, "--debounce-max", help="start at most this long after the window's first start"
    ),
    attr: list[str] | None = typer.Option(
        None,
        "--attr",
        help="a search attribute KEY=VALUE (repeatable; VALUE as JSON if it parses, else text)",
    ),
    wait: bool = typer.Option(
        False, "--wait", help="wait until the run has finished, showing its progress on stderr"
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Start a run; prints {"run_id", "status", "version"} (of the run a debounced start
    joined, when it joined one)."""
    data = parse_json(input_text, "--input")
    attributes = _attributes(attr)
    when = _instant(available_at, "--available-at")
    deadline = _instant(deadline_at, "--deadline-at")
    durably = options(ctx).load(need_app=True)

    async def go() -> Any:
        handle = await durably.start(
            workflow, data, version=version, idempotency_key=idempotency_key,
            available_at=when, deadline_at=deadline, concurrency_key=concurrency_key,
            priority=priority, debounce=debounce, debounce_key=debounce_key,
            debounce_max=debounce_max,
            attributes=attributes,
        )  # fmt: skip
        if wait:
            return await wait_with_progress(durably, handle.run_id)
        return handle.run or await handle.get()

    r = run(go(), durably)
    doc = documents.started(r)
    if wait:
        doc.update(output=r.output, error=r.error)
    if json_out:
        print_json(doc)
    else:
        typer.echo(f"run {r.run_id} ({r.workflow}@{r.version}) {r.status}")
    if wait and r.status != "completed":
        raise typer.Exit(1)


def signal(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the signal's name"),
    data_text: str | None = typer.Option(None, "--data", help="JSON, or @file"),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key"),
    run_id: str | None = typer.Option(None, "--run", help="address one run"),
    expires: str | None = typer.Option(None, "--expires", help="drop it unread after (1d)"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Send a durable signal; prints {"delivered_to", "buffered", "duplicate"}."""
    data = parse_json(data_text, "--data")
    durably = options(ctx).load()

    result = run(durably.send_signal(
        name, data, idempotency_key=idempotency_key, run_id=run_id, expires=expires
    ), durably)  # fmt: skip
    if json_out:
        print_json(result)
    elif result["duplicate"]:
        typer.echo("duplicate: this idempotency key was sent before; nothing new was sent")
    elif result["delivered_to"]:
        typer.echo(f"delivered to {', '.join(result['delivered_to'])}")
    elif run_id is not None:
        typer.echo(f"buffered for run {run_id}: its next wait_for_signal({name!r}) receives it")
    else:
        typer.echo(f"buffered: the next wait_for_signal({name!r}) receives it")
    if not (result["duplicate"] or result["delivered_to"] or run_id):
        # A typo in the name shows here, not as a run waiting forever (stdout stays the
        # one document; the exit code says the send worked, which it did).
        warning = (f"no run is waiting for signal {name!r}: it is buffered until one "
                   f"waits for it (a typo in the name? `durably signals --name {name}` "
                   "lists it)")  # fmt: skip
        if json_out:  # as an error is with --json: one JSON line on stderr
            typer.echo(json.dumps({"warning": warning}), err=True)
        else:
            typer.echo(f"warning: {warning}", err=True)


def cancel(
    ctx: typer.Context,
    run_id: str = typer.Argument(...),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Cancel a run (and its children); a step in flight is interrupted."""
    durably = options(ctx).load()

    r = run(durably.cancel(run_id), durably)
    if json_out:
        print_json(documents.run(r))
    else:
        typer.echo(f"run {r.run_id} {r.status}")


def list_runs(
    ctx: typer.Context,
    status: str | None = typer.Option(None, "--status"),
    workflow: str | None = typer.Option(None, "--workflow"),
    queue: str | None = typer.Option(None, "--queue", help="runs of this queue"),
    stuck: bool = typer.Option(False, "--stuck", help="due runs nothing is taking, and held runs"),
    limit: int = typer.Option(100, "--limit", min=1),
    attr: list[str] | None = typer.Option(
        None,
        "--attr",
        help="runs whose search attribute KEY equals VALUE: KEY=VALUE, "
        'repeatable (all must match); VALUE is read as JSON if it parses (30, true, "30"), '
        "else as text (c-1)",
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """List runs, newest first."""
    if status is not None and status not in STATUSES:
        fail(f"--status must be one of {', '.join(STATUSES)}", 2)
    attributes = _attributes(attr)
    durably = options(ctx).load(read_only=True)

    async def go() -> Any:
        if stuck:
            found = await durably.list_stuck(limit)
            return [r for r in found if (status is None or r.status == status)
                    and (workflow is None or r.workflow == workflow)
                    and (queue is None or r.queue == queue)
                    and matches(r.attributes, attributes or {})]  # fmt: skip
        return await durably.list_runs(status=status, workflow=workflow, limit=limit,
                                       queue=queue, attributes=attributes)  # fmt: skip

    found = run(go(), durably)
    if json_out:
        print_json(documents.runs(found))
    else:
        _render.runs_table(found)


def show(
    ctx: typer.Context,
    run_id: str | None = typer.Argument(None, help="a run id, or a unique prefix of 8+ characters"),
    key: str | None = typer.Option(
        None, "--key", help="instead of RUN_ID: the idempotency key the run was started with"
    ),
    workflow: str | None = typer.Option(
        None, "--workflow", help="with --key: the run's workflow (when several have the key)"
    ),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Show a run (its id, 8+ first characters of it, or --key), its step attempts as a
    timeline and the latest value of each event it set."""
    if (run_id is None) == (key is None) or (workflow is not None and key is None):
        fail("show takes a run id or --key K (with --workflow W if several workflows have "
             "that key)", 2)  # fmt: skip
    durably = options(ctx).load(read_only=True)

    async def go() -> Any:
        found = await _run_id(durably, run_id, key, workflow)
        return (await durably.get_run(found), await durably.list_steps(found),
                await durably.list_events(found))  # fmt: skip

    r, steps, events = run(go(), durably)
    if json_out:
        print_json(documents.shown(r, steps, events))
    else:
        _render.timeline(r, steps)
        _render.events(events)


async def _run_id(durably: Durably, prefix: str | None, key: str | None,
                  workflow: str | None) -> str:  # fmt: skip
    if prefix is not None:
        return await durably.run_id_from_prefix(prefix)
    try:
        handle = await durably.run_handle(idempotency_key=key, workflow=workflow)
    except InvalidInput as exc:  # runs of several workflows have the key
        fail(f"{exc} with --workflow", 2)
    return handle.run_id


def schedules(
    ctx: typer.Context,
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """List the app's scheduled workflows with their next tick."""
    durably = options(ctx).load(need_app=True)
    found = durably.schedules()
    if json_out:
        print_json(found)
        return
    if not found:
        typer.echo("no scheduled workflows")
    for s in found:
        typer.echo(f"{s['workflow']}@{s['version']}  {s['schedule']!r} ({s['tz']})"
                   f"  next {s['next_at']}{'  backfill' if s['backfill'] else ''}")  # fmt: skip
