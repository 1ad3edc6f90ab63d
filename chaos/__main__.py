"""`python -m chaos`: the chaos soak.

    uv run python -m chaos --minutes 10                       # a throwaway PostgreSQL cluster
    uv run python -m chaos --minutes 10 --database postgresql://postgres@127.0.0.1:5432
    uv run python -m chaos --minutes 5 --database sqlite:///tmp/chaos.db
    uv run python -m chaos --profile ci                       # 2 minutes, throwaway cluster

Without `--database` (or with `--database cluster`) the soak starts a PostgreSQL cluster of
its own (tests/pgcluster.py), so it can stop it. Given a server's URL it works in a fresh
database of its own there and never restarts the server. On SQLite, faults are worker kills,
freezes and drains. `CHAOS_PLANT=double-signal` or `CHAOS_PLANT=outside-tx` plants a fault
in the soak's own workload, to show the checks catch it. Exit status: 0 when every invariant
holds, 1 when one is violated, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from tests.faults import FaultProxy
from tests.pgcluster import Cluster, available

from durably import DatabaseUnavailable, Durably

from . import invariants, ledger, workload
from .faults import FaultInjector, Workers
from .load import LoadGenerator
from .migration import SchemaMigration

PROFILES = {"ci": {"minutes": 2.0, "drain": 45.0, "in_flight": 24, "rate": 5.0}}


@dataclass
class Target:
    """The database under test, and what the soak may do to it."""

    url: str
    label: str
    cluster: Cluster | None = None  # ours: may be stopped and started
    proxy: FaultProxy | None = None  # in front of PostgreSQL, for one worker


@contextlib.contextmanager
def open_target(database: str | None, keep: bool) -> Iterator[Target]:
    if database and database.startswith("sqlite:///"):
        yield Target(database, f"SQLite {database.removeprefix('sqlite:///')}")
        return
    if database and database.startswith("postgres"):
        yield from _server_target(database, keep)
        return
    if database not in (None, "cluster"):
        raise SystemExit("chaos: --database takes postgresql://..., sqlite:///... or cluster")
    if not available():
        raise SystemExit("chaos: initdb/pg_ctl are needed for a throwaway PostgreSQL cluster")
    cluster = Cluster().init()
    try:
        cluster.start()
        with psycopg.connect(f"{cluster.url}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE chaos")
        with FaultProxy("127.0.0.1", cluster.port) as proxy:
            yield Target(f"{cluster.url}/chaos", f"PostgreSQL, throwaway cluster on port "
                         f"{cluster.port}, stopped and restarted", cluster, proxy)  # fmt: skip
    finally:
        cluster.destroy()


def _server_target(url: str, keep: bool) -> Iterator[Target]:
    parts = urlsplit(url)
    name = f"chaos_{uuid.uuid4().hex[:10]}"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            yield Target(urlunsplit(parts._replace(path=f"/{name}")),
                         f"PostgreSQL at {parts.hostname}:{parts.port}, database {name} "
                         "(not restarted: not the soak's server)", proxy=proxy)  # fmt: skip
    finally:
        if not keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--minutes", type=float, default=10.0, help="how long load and faults run")
    p.add_argument("--database", help="postgresql://…, sqlite:///…, or cluster (default)")
    p.add_argument("--profile", choices=sorted(PROFILES), help="ci: 2 minutes, own cluster")
    p.add_argument("--workers", type=int, default=3, help="worker processes (at least 3)")
    p.add_argument("--lease", type=float, default=3.0, help="the workers' lease, seconds")
    p.add_argument("--seed", type=int, default=None, help="reproduce a soak's random choices")
    p.add_argument("--drain", type=float, default=120.0, help="seconds allowed to drain")
    p.add_argument("--in-flight", type=int, default=None, help="most unfinished runs at once")
    p.add_argument("--rate", type=float, default=None, help="most starts a second")
    p.add_argument("--keep", action="store_true", help="keep the logs and ledger directory")
    p.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = p.parse_args(argv)
    for key, value in PROFILES.get(args.profile or "", {}).items():
        setattr(args, key, value)
    sqlite = (args.database or "").startswith("sqlite")
    args.in_flight = args.in_flight or (24 if sqlite else 32)
    args.rate = args.rate or (5.0 if sqlite else 6.0)
    args.seed = args.seed if args.seed is not None else random.randrange(10**6)
    if args.workers < 3:
        p.error("--workers must be at least 3")
    plant = os.environ.get("CHAOS_PLANT", "")
    if plant and plant not in workload.PLANTS:
        p.error(f"CHAOS_PLANT must be one of {', '.join(workload.PLANTS)}")
    if sqlite and Path(args.database.removeprefix("sqlite:///")).exists():
        p.error(f"{args.database} exists; name a new file (the soak checks every run in it)")
    if plant == "outside-tx" and sqlite:
        p.error("CHAOS_PLANT=outside-tx needs PostgreSQL (SQLite has one writer at a time)")
    return args


async def soak(args: argparse.Namespace, target: Target, work: Path) -> invariants.Report:
    plant = os.environ.get("CHAOS_PLANT", "")
    rng = random.Random(args.seed)
    notes = work / "ledger"
    notes.mkdir()
    app = workload.app.rebind(target.url)
    await app.migrate()
    ledger.setup_business(target.url)
    proxy_url = target.proxy.url_for(target.url) if target.proxy else None
    workers = Workers(target.url, proxy_url, work, {"CHAOS_LEDGER": str(notes),
                      "CHAOS_PLANT": plant}, args.lease, args.workers)  # fmt: skip
    sqlite = target.url.startswith("sqlite")
    migration = None if sqlite else SchemaMigration(target.url, app.connector.schema)
    injector = FaultInjector(workers, rng, target.proxy, target.cluster,
                             target.url if sqlite else None, migration)  # fmt: skip
    load = LoadGenerator(app, rng, args.in_flight, args.rate, plant)
    began = time.monotonic()
    workers.start()
    try:
        stop = asyncio.Event()
        jobs = [load.run(stop), injector.run(stop)]
        if target.cluster is not None:
            jobs.append(injector.restart_database(stop))
        if migration is not None:
            jobs.append(injector.migrate_schema(stop))
        tasks = [asyncio.create_task(job) for job in jobs]
        await asyncio.wait(tasks, timeout=args.minutes * 60)
        stop.set()
        await asyncio.gather(*tasks)  # each ends once its current fault is over
        loaded = time.monotonic() - began
        await injector.heal()
        undrained = await load.drain(args.drain)
        await _until_quiet(app, began + loaded + args.drain + 30)
        drained = time.monotonic() - began - loaded
    finally:
        workers.stop()
    ev = await invariants.gather_evidence(
        app, plans=load.plans, ledger=ledger.read_ledger(notes),
        effects=ledger.read_effects(target.url), faults=injector.log, undrained=undrained,
        deploys=workers.deploys, deaths=workers.deaths,
    )  # fmt: skip
    await app.close()
    header = (f"chaos soak on {target.label}: {loaded / 60:.1f} min of load and faults, "
              f"{drained:.0f} s to drain; {args.workers} workers, lease {args.lease:g}s; "
              f"seed {args.seed}")  # fmt: skip
    if plant:
        header += f"; PLANTED: {workload.PLANTS[plant]}"
    facts = _facts(load, workers)
    if injector.tx_takeovers:
        facts["workers frozen inside step.transaction, their run taken over meanwhile"] = (
            f"{sum(injector.tx_takeovers)} of {len(injector.tx_takeovers)}"
        )
    return invariants.Report(header, ev, invariants.check_all(ev), facts)


def _facts(load: LoadGenerator, workers: Workers) -> dict[str, object]:
    cancels = Counter(p.cancel for p in load.plans.values() if p.cancel_after is not None)
    return {
        "client calls retried through outages": load.retried,
        "generator's signals, as send_signal reported them": _signal_results(load),
        "cancels by outcome": dict(sorted(cancels.items())),
        "worker log: runs given up (lease lost or expired, taken over)": (
            workers.log_lines("its lease") + workers.log_lines("taken over")
        ),
        "worker log: database unavailable": workers.log_lines("unavailable"),
        "worker log: unexpected errors": workers.log_lines("unexpected error"),
        # The engine's way through a schema migration (PostgresConnector._raise_for).
        "worker log: schema changed under prepared statements, connections replaced": (
            workers.log_lines("the schema changed under the engine's prepared statements")
        ),
        "worker processes started, by deploy": dict(Counter(sorted(workers.deploys.values()))),
    }


def _signal_results(load: LoadGenerator) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for plan in load.plans.values():
        for sent in plan.sent:
            how = "delivered to a waiting run" if sent["delivered_to"] else "buffered"
            if sent.get("found"):
                how = "plain send found stored after its reply was lost"
            counts["duplicate (a retried send)" if sent["duplicate"] else how] += 1
    return dict(sorted(counts.items()))


async def _until_quiet(app: Durably, until: float) -> None:
    """Wait until every run is done (children and compensations too), or `until`."""
    while time.monotonic() < until:
        try:
            busy = [r for s in ("pending", "running", "waiting")
                    for r in await app.list_runs(status=s, limit=1)]  # fmt: skip
            if not busy and all(r.done for r in await invariants.all_runs(app)):
                return
        except DatabaseUnavailable:
            pass
        await asyncio.sleep(1)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    # The client's own warnings (reconnects through outages) go to a file, not the report.
    logging.basicConfig(filename=work / "soak.log", level=logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    print(f"chaos: seed {args.seed}, {args.minutes:g} min; logs and ledger in {work}",
          flush=True)  # fmt: skip
    with open_target(args.database, args.keep) as target:
        report = asyncio.run(soak(args, target, work))
    print(report.render(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2))
    if report.ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"chaos: logs and ledger kept in {work}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
