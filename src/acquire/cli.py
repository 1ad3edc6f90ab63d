"""The `acquire` command line: add, status, cancel, worker, notify, demo."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from durably import DurablyError, RunNotFound, RunTerminalError

from . import library, view
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


def _check_destination(path: Path) -> None:
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        fail(f"the library directory {path} is not writable")


def validate_order(source: str, to: Path, order_id: str, client: str, retention: str) -> Order:
    """The order, or a clear error (exit 2) and nothing started."""
    try:
        order = Order.model_validate(
            {
                "id": order_id,
                "source": source,
                "client": client,
                "library": str(to.resolve()),
                "retention": retention,
            }
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"invalid {'.'.join(map(str, err['loc']))}: {err['msg']}")
    if client == "local":
        if not Path(source).is_file():
            fail(f"the source file {source} does not exist")
        order = order.model_copy(update={"source": str(Path(source).resolve())})
    else:
        try:
            resolve(source)
        except BadSource as exc:
            fail(str(exc))
    _check_destination(to)
    return order


@cli.command()
def add(
    source: str = typer.Argument(..., help="magnet link, .torrent path or URL, or a file"),
    to: Path = typer.Option(..., "--to", help="the library directory"),
    order_id: str | None = typer.Option(None, "--id", help="default: a new id"),
    client: str = typer.Option(os.environ.get("ACQUIRE_CLIENT", "qbittorrent"), "--client",
                               help="qbittorrent or local"),
    retention: str = typer.Option("7 days", "--retention", help="seed this long, then clean"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:  # fmt: skip
    """Start acquiring SOURCE into the library directory."""
    if client not in ("qbittorrent", "local"):
        fail("--client must be qbittorrent or local")
    order = validate_order(source, to, order_id or uuid.uuid4().hex[:12], client, retention)
    library.ensure_tables(app.url)

    async def go() -> Any:
        async with app:
            return await acquire.start(order, idempotency_key=f"acquire:{order.id}")

    handle = _run(go())
    if json_out:
        typer.echo(json.dumps({"id": order.id, "run_id": handle.run_id}))
    else:
        typer.echo(f"order {order.id}: run {handle.run_id} started")


@cli.command()
def status(
    order_id: str | None = typer.Argument(None, help="one order; default: all"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Show orders: the run's status, steps and download progress."""

    async def go() -> Any:
        async with app:
            runs = await app.list_runs(workflow="acquire", limit=1000)
            if order_id is not None:
                runs = [r for r in runs if (r.input or {}).get("id") == order_id]
                if not runs:
                    raise RunNotFound(f"no order with id {order_id!r}")
            return [(r, await app.list_steps(r.run_id)) for r in runs]

    found = _run(go())
    if json_out:
        typer.echo(json.dumps([view.order_doc(r, s) for r, s in found], default=str))
    else:
        view.print_orders(found, detail=order_id is not None)


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

    async def go() -> Any:
        async with app:
            return await app.send_signal(
                f"download-done:{order_id}", {"hash": info_hash, "content_path": content_path},
                idempotency_key=f"done:{info_hash}",
            )  # fmt: skip

    result = _run(go())
    typer.echo(json.dumps(result))


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
    if importlib.util.find_spec("qbittorrentapi") is None:
        sys.exit('acquire is installed with its extra: pip install "durably[acquire]"')
    cli()


if __name__ == "__main__":
    main()
