"""The `acquire` command line: add, status, cancel, worker, notify, demo."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from durably import (
    DatabaseUnavailable,
    DurablyError,
    RunNotFound,
    RunTerminalError,
    parse_duration,
)

from . import library, naming, view
from .torrents import BadSource, resolve
from .workflow import Order, acquire, app

cli = typer.Typer(help="acquire: torrent → qBittorrent → library, durably.",
                  no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)  # fmt: skip


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _run(coro: Any) -> Any:
    try:
        return asyncio.run(coro)
    except (RunNotFound, RunTerminalError) as exc:
        fail(str(exc), 2 if isinstance(exc, RunNotFound) else 1)
    except DurablyError as exc:
        fail(str(exc), 1)
    except KeyboardInterrupt:  # Ctrl-C ends `status --watch` (or a worker) quietly
        raise typer.Exit(130) from None


def _check_destination(path: Path) -> None:
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        fail(f"the library directory {path} is not writable")


def _release_name(source: str, client: str) -> str | None:
    if client == "local":
        return Path(source).name
    try:
        return resolve(source).name or None
    except BadSource as exc:
        fail(str(exc))
    return None


def _check_naming(order: Order) -> None:
    """A template that needs a title or year the release name does not give: exit 2 now."""
    if order.template is None:
        return
    used = naming.check_template(order.template) & {"title", "year"}
    missing = {f for f in used if getattr(order, f) is None}
    name = _release_name(order.source, order.client) if missing else None
    if not missing or name is None:
        return
    parsed = naming.parse_release(name)
    still = sorted(f for f in missing if f not in parsed)
    if still:
        fail(f"the template needs the {' and '.join(still)}, which the release name "
             f"{name!r} does not give: pass --{still[0]}")  # fmt: skip


def validate_order(source: str, to: Path, order_id: str, client: str, **options: Any) -> Order:
    """The order, or a clear error (exit 2) and nothing started."""
    try:
        order = Order.model_validate(
            {"id": order_id, "source": source, "client": client, "library": str(to.resolve()),
             **{k: v for k, v in options.items() if v is not None}}
        )  # fmt: skip
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])).replace("_", "-")
        fail(f"invalid {where}: {err['msg'].removeprefix('Value error, ')}")
    if client == "local":
        if not Path(source).exists():
            fail(f"the source file {source} does not exist")
        order = order.model_copy(update={"source": str(Path(source).resolve())})
    else:
        _release_name(source, client)  # a bad source fails here
    _check_destination(to)
    _check_naming(order)
    return order


@cli.command()
def add(
    source: str = typer.Argument(..., help="magnet link, .torrent path or URL, or a file/folder"),
    to: Path = typer.Option(..., "--to", help="the library directory"),
    order_id: str | None = typer.Option(None, "--id", help="default: a new id"),
    client: str = typer.Option(os.environ.get("ACQUIRE_CLIENT", "qbittorrent"), "--client",
                               help="qbittorrent or local"),
    retention: str = typer.Option("7 days", "--retention",
                                  help="seed this long, then clean (without a seeding goal)"),
    link: str = typer.Option("auto", "--link", help="auto (hard link if possible), hardlink, copy"),
    template: str | None = typer.Option(None, "--template",
                                        help='e.g. "{title} ({year})/{title} ({year}){ext}"'),
    title: str | None = typer.Option(None, "--title", help="default: from the release name"),
    year: int | None = typer.Option(None, "--year", help="default: from the release name"),
    seed_ratio: float | None = typer.Option(None, "--seed-ratio", help="clean up at this ratio"),
    seed_time: str | None = typer.Option(None, "--seed-time",
                                         help="clean up after seeding this long"),
    stall: str | None = typer.Option(None, "--stall", help="fail after no progress this long"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:  # fmt: skip
    """Start acquiring SOURCE into the library directory."""
    if client not in ("qbittorrent", "local"):
        fail("--client must be qbittorrent or local")
    if link not in ("auto", "hardlink", "copy"):
        fail("--link must be auto, hardlink or copy")
    order = validate_order(source, to, order_id or uuid.uuid4().hex[:12], client,
                           retention=retention, link=link, template=template, title=title,
                           year=year, seed_ratio=seed_ratio, seed_time=seed_time,
                           stall=stall)  # fmt: skip
    library.ensure_tables(app.url)

    async def go() -> Any:
        async with app:
            return await acquire.start(order, idempotency_key=f"acquire:{order.id}")

    handle = _run(go())
    if json_out:
        typer.echo(json.dumps({"id": order.id, "run_id": handle.run_id}))
    else:
        typer.echo(f"order {order.id}: run {handle.run_id} started")


def _live(run: Any, steps: list[Any]) -> dict[str, Any] | None:
    """The client's view of a download in progress (None when it cannot be had)."""
    sub = view.submitted(steps)
    if sub is None or view.state_of(run, steps) != "downloading":
        return None
    from .clients import client_for

    try:
        st = client_for(sub["client"]).status(sub["hash"], (run.input or {}).get("source"))
    except Exception:  # a display only: a client that is away shows as no live data
        return None
    return {"progress": st.progress, "speed": st.speed, "eta": st.eta} if st.exists else None


async def _orders(order_id: str | None) -> list[tuple[Any, list[Any], dict[str, Any]]]:
    async with app:
        runs = await app.list_runs(workflow="acquire", limit=1000)
        if order_id is not None:
            runs = [r for r in runs if (r.input or {}).get("id") == order_id]
            if not runs:
                raise RunNotFound(f"no order with id {order_id!r}")
        found = []
        for r in runs:
            steps = await app.list_steps(r.run_id)
            live = await asyncio.to_thread(_live, r, steps)
            found.append((r, steps, view.order_doc(r, steps, live)))
        return found


@cli.command()
def status(
    order_id: str | None = typer.Argument(None, help="one order; default: all"),
    watch: bool = typer.Option(False, "--watch", help="refresh in place until Ctrl-C"),
    every: str = typer.Option("2s", "--every", help="refresh interval with --watch"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """List orders: state, progress, speed and ETA (one line each); `--watch` refreshes."""
    if watch:
        if json_out:
            fail("--watch and --json do not go together")
        try:
            seconds = parse_duration(every).total_seconds()
        except DurablyError as exc:
            fail(f"invalid --every: {exc}")
        _run(_watch(order_id, seconds))
        return
    found = _run(_orders(order_id))
    docs = [doc for _, _, doc in found]
    if json_out:
        typer.echo(json.dumps(docs, default=str))
    else:
        view.print_orders([(r, s) for r, s, _ in found], docs, detail=order_id is not None)


async def _watch(order_id: str | None, seconds: float) -> None:
    """Redraw the orders table every `seconds` (in place on a terminal) until stopped."""
    from rich.live import Live

    console = view.console
    if not console.is_terminal:  # a pipe or a log: one table after another
        while True:
            docs = [doc for _, _, doc in await _orders(order_id)]
            console.print(view.orders_table(docs))
            sys.stdout.flush()
            await asyncio.sleep(seconds)
    with Live(console=console, auto_refresh=False) as live:
        try:
            while True:
                docs = [doc for _, _, doc in await _orders(order_id)]
                live.update(view.orders_table(docs), refresh=True)
                await asyncio.sleep(seconds)
        except (KeyboardInterrupt, asyncio.CancelledError):
            return


@cli.command()
def cancel(order_id: str = typer.Argument(...)) -> None:
    """Cancel an order: the step in flight stops; the torrent and its data are removed."""

    async def go() -> Any:
        async with app:
            for r in await app.list_runs(workflow="acquire", limit=1000):
                if (r.input or {}).get("id") == order_id:
                    return await app.cancel(r.run_id)
            raise RunNotFound(f"no order with id {order_id!r}")

    run = _run(go())
    typer.echo(f"order {order_id}: run {run.run_id} {run.status}")


@cli.command()
def worker(concurrency: int = typer.Option(4, "--concurrency", min=1),
           lease: str = typer.Option("30s", "--lease"),
           heartbeat: str = typer.Option("10s", "--heartbeat")) -> None:  # fmt: skip
    """Run a worker for acquire orders (SIGTERM drains)."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    library.ensure_tables(app.url)

    async def go() -> None:
        try:  # the worker connects (and migrates) itself, retrying while the database is away
            await app.worker(concurrency=concurrency, lease=lease, heartbeat=heartbeat).run()
        finally:
            await app.close()

    _run(go())


# How long the finish hook keeps trying through a database outage. qBittorrent runs it
# once; after that, only the order's next check (up to ACQUIRE_POLL_MAX apart) sees that
# the download finished.
NOTIFY_TRIES_S = 120.0


@cli.command()
def notify(
    info_hash: str = typer.Argument(..., help="the torrent's info hash (qBittorrent's %I)"),
    order_id: str | None = typer.Option(None, "--id", help="skip the lookup by tag"),
    content_path: str | None = typer.Argument(None, help="qBittorrent's %F (optional)"),
) -> None:
    """Tell the order's run that its download finished (qBittorrent's finish hook)."""
    if order_id is None:
        from .clients import client_for
        from .clients.qbittorrent import QbittorrentClient

        client = client_for("qbittorrent")
        assert isinstance(client, QbittorrentClient)
        order_id = client.order_of(info_hash)
        if order_id is None:
            fail(f"no acquire order is tagged on torrent {info_hash}", 1)

    async def send() -> Any:
        return await app.send_signal(
            f"download-done:{order_id}", {"hash": info_hash, "content_path": content_path},
            idempotency_key=f"done:{info_hash}",  # sent again through an outage: once
        )  # fmt: skip

    result = _run(_through_outages(send, NOTIFY_TRIES_S))
    typer.echo(json.dumps(result))


async def _through_outages(call: Callable[[], Awaitable[Any]], give_up_s: float) -> Any:
    """`await call()` on the app, again (0.5 s doubling to 10 s apart) while the database is
    unavailable, all within `give_up_s` (a frozen network included: a send waits for its
    name's lock with no deadline of its own); the app is closed after."""
    deadline, last = asyncio.timeout(give_up_s), "no answer"
    try:
        async with deadline:
            pause = 0.5
            while True:
                try:
                    return await call()
                except DatabaseUnavailable as exc:
                    last = str(exc)
                    typer.echo(f"{exc}; trying again in {pause:g}s", err=True)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 10.0)
    except TimeoutError:
        if not deadline.expired():
            raise
        raise DatabaseUnavailable(f"gave up after {give_up_s:g}s: {last}") from None
    finally:
        await app.close()


@cli.command()
def demo(
    size_mb: int = typer.Option(20, "--size-mb", min=1, help="size of the generated file"),
    workdir: Path | None = typer.Option(None, "--workdir", help="default: a new temp dir"),
) -> None:
    """Run the whole pipeline on the embedded SQLite default with a generated local file."""
    from .demo import run_demo

    _run(run_demo(size_mb, workdir))


def main() -> None:
    """Entry point of the `acquire` script."""
    if any(importlib.util.find_spec(m) is None for m in ("qbittorrentapi", "guessit")):
        sys.exit('acquire is installed with its extra: pip install "durably[acquire]"')
    cli()


if __name__ == "__main__":
    main()
