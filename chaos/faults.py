"""Worker processes and the faults the soak injects into them and into the database.

Every 2-10 s one random fault hits one worker: kill -9 (then a new worker takes the slot),
SIGSTOP for longer than the lease then SIGCONT (also inside a `step.transaction` body, on
PostgreSQL: another worker must take its run over meanwhile), SIGTERM (the worker drains,
a new one takes the slot), a rolling deploy (SIGTERM, and the slot's next worker runs the
other deploy of `workload.DEPLOYS`; at least one worker always runs the new one), and,
for the worker connected through the `FaultProxy`, a network freeze longer than the lease,
or a COMMIT whose reply is lost. The soak begins mid-deploy: the second worker runs the old deploy.
Independently, on PostgreSQL, a schema migration (`migration`) runs every 10-30 s, and
PostgreSQL (a cluster of the soak's own) is stopped for 0-5 s every 5-40 s. Each fault is
logged with the worker it hit ("*": all of them) and when, so the checks can tell a
re-execution a fault explains from one nothing explains.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from tests.faults import FaultProxy
from tests.helpers import freeze_outside_a_write
from tests.pgcluster import Cluster

from .migration import SchemaMigration

ROOT = Path(__file__).resolve().parents[1]
APP = "chaos.workload:app"


@dataclass(frozen=True)
class Fault:
    """One injected fault: what, which worker ("*": every one; "schema": none, a migration
    must not cost a worker its runs), from when to when."""

    kind: str
    target: str
    t0: float
    t1: float


@dataclass
class Slot:
    """A place for one worker process; a worker killed or drained is replaced by the next."""

    base: str
    via_proxy: bool
    deploy: str = "new"  # the deploy its next worker runs (workload.DEPLOYS)
    generation: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"{self.base}.{self.generation}"


@dataclass
class Workers:
    """The soak's worker processes: `python -m durably.cli worker` on the chaos app."""

    url: str
    proxy_url: str | None
    logs: Path
    env: dict[str, str]
    lease_s: float
    count: int = 3
    concurrency: int = 12
    slots: list[Slot] = field(default_factory=list)
    deploys: dict[str, str] = field(default_factory=dict)  # each worker started, its deploy
    deaths: list[str] = field(default_factory=list)  # workers that exited with no fault

    def start(self) -> None:
        for i in range(self.count):
            via = self.proxy_url is not None and i == self.count - 1
            deploy = "old" if i == 1 else "new"  # the soak begins in mid-deploy
            self.slots.append(Slot(f"net{i}" if via else f"w{i}", via, deploy))
        for slot in self.slots:
            self.spawn(slot)

    def spawn(self, slot: Slot) -> None:
        slot.generation += 1
        self.deploys[slot.name] = slot.deploy
        url = self.proxy_url if slot.via_proxy and self.proxy_url else self.url
        env = dict(os.environ, **self.env, DURABLY_DATABASE_URL=url, DURABLY_APP=APP,
                   WORKER_NAME=slot.name, CHAOS_DEPLOY=slot.deploy,
                   PYTHONPATH=str(ROOT))  # fmt: skip
        heartbeat = f"{self.lease_s / 5:g}s"
        cmd = [sys.executable, "-m", "durably.cli", "worker", "--id", slot.name,
               "--lease", f"{self.lease_s:g}s", "--heartbeat", heartbeat, "--grace", "2s",
               "--poll", "1s", "--concurrency", str(self.concurrency)]  # fmt: skip
        with open(self.logs / f"{slot.name}.log", "ab") as log:
            slot.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip

    def alive(self) -> list[Slot]:
        return [s for s in self.slots if s.proc is not None and s.proc.poll() is None]

    def died(self, slot: Slot) -> None:
        """`slot`'s worker exited with no fault to stop it (user code must never stop a
        worker: a body raising SystemExit): counted for the checks, then replaced."""
        if slot.proc is not None:
            self.deaths.append(f"{slot.name} (exit status {slot.proc.returncode})")
        self.spawn(slot)

    def stop(self, timeout: float = 20) -> None:
        """SIGCONT, then SIGTERM every worker; SIGKILL one that has not ended by `timeout`."""
        self.deaths += [f"{s.name} (exit status {s.proc.returncode})" for s in self.slots
                        if s.proc is not None and s.proc.poll() is not None]  # fmt: skip
        for slot in self.alive():
            assert slot.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(slot.proc.pid, signal.SIGCONT)
                slot.proc.send_signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(slot.proc.pid, signal.SIGKILL)
                slot.proc.wait()

    def log_lines(self, needle: str) -> int:
        """How many lines of all worker logs contain `needle`."""
        logs = [self.logs / f"{name}.log" for name in self.deploys]
        return sum(p.read_text(errors="replace").count(needle) for p in logs if p.exists())


async def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    until = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > until:
            return False
        await asyncio.sleep(0.05)
    return True


class FaultInjector:
    """Injects random faults until stopped, then heals everything it broke.

    Args:
        workers: the worker processes.
        rng: the soak's random source.
        proxy: the proxy the `via_proxy` worker goes through (PostgreSQL only).
        cluster: a PostgreSQL cluster the soak may stop and start (None: no restarts).
        sqlite_url: on SQLite, workers are frozen only outside a write transaction (a
            frozen writer holds the file's lock, a documented limit of SQLite).
        migration: the schema migration to run under the workers (PostgreSQL only).
    """

    def __init__(
        self, workers: Workers, rng: random.Random, proxy: FaultProxy | None = None,
        cluster: Cluster | None = None, sqlite_url: str | None = None,
        migration: SchemaMigration | None = None,
    ) -> None:  # fmt: skip
        self.workers = workers
        self.rng = rng
        self.proxy = proxy
        self.cluster = cluster
        self.sqlite_url = sqlite_url
        self.migration = migration
        self.log: list[Fault] = []
        self.db_down = False
        self.tx_takeovers: list[bool] = []  # sigstop-in-tx: taken over while frozen?

    def counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.log)

    def kinds(self) -> list[str]:
        kinds = ["kill-9", "sigstop", "sigterm", "rolling-deploy"]
        if self.migration is not None:  # PostgreSQL (a frozen SQLite writer holds the file)
            kinds.append("sigstop-in-tx")
        if self.proxy is not None:
            kinds += ["net-freeze", "commit-reply-lost"]
        return kinds

    async def run(self, stop: asyncio.Event) -> None:
        """Every 2-10 s, one random fault on one random worker."""
        while not await _stopped(stop, self.rng.uniform(2, 10)):
            kind = self.rng.choice(self.kinds())
            slot = self._target(kind)
            if slot.proc is None or slot.proc.poll() is not None:
                self.workers.died(slot)
                continue
            await getattr(self, "_" + kind.replace("-", "_"))(slot)

    def _target(self, kind: str) -> Slot:
        slots = self.workers.slots
        if kind in ("net-freeze", "commit-reply-lost"):
            return next(s for s in slots if s.via_proxy)
        if kind == "rolling-deploy":  # never the last worker of the new deploy
            new = sum(s.deploy == "new" for s in slots)
            return self.rng.choice([s for s in slots if s.deploy == "old" or new > 1])
        return self.rng.choice(slots)

    async def _kill_9(self, slot: Slot) -> None:
        assert slot.proc is not None
        t0 = time.time()
        os.killpg(slot.proc.pid, signal.SIGKILL)
        await _wait_exit(slot.proc, 10)
        self.log.append(Fault("kill-9", slot.name, t0, time.time()))
        await asyncio.sleep(self.rng.uniform(0, 1))
        self.workers.spawn(slot)

    async def _sigstop(self, slot: Slot) -> None:
        assert slot.proc is not None
        proc = slot.proc
        t0 = time.time()
        if self.sqlite_url:
            await asyncio.to_thread(freeze_outside_a_write, proc, self.sqlite_url)
        else:
            os.killpg(proc.pid, signal.SIGSTOP)
        await asyncio.sleep(self.workers.lease_s + self.rng.uniform(1, 3))
        os.killpg(proc.pid, signal.SIGCONT)
        # Until it has noticed its leases are gone, its bodies may still be running.
        self.log.append(Fault("sigstop", slot.name, t0, time.time() + 1))

    async def _sigstop_in_tx(self, slot: Slot) -> None:
        """SIGSTOP while the worker is inside a `step.transaction` body, its row written
        (the body waits there when asked: `workload._hold_for_a_freeze`), until another
        worker has taken the run over (at most the lease + 8 s). Thawed, its transaction
        must commit nothing (`check_effects`)."""
        assert slot.proc is not None and self.migration is not None
        folder = Path(self.workers.env["CHAOS_LEDGER"])
        ask, inside = folder / f"hold-tx-{slot.name}", folder / f"inside-tx-{slot.name}"
        inside.unlink(missing_ok=True)  # a body that came too late the last time goes on
        ask.touch()
        until = time.monotonic() + 10
        while not inside.exists() and time.monotonic() < until:
            await asyncio.sleep(0.02)
        ask.unlink(missing_ok=True)
        if not inside.exists():
            return  # no transaction body came by
        run_id, proc, t0 = inside.read_text(), slot.proc, time.time()
        fence = await self._fence(run_id)
        os.killpg(proc.pid, signal.SIGSTOP)
        taken, until = False, time.monotonic() + self.workers.lease_s + 8
        while not taken and time.monotonic() < until:
            await asyncio.sleep(0.1)
            now = await self._fence(run_id)  # a claim by another worker bumps it
            taken = fence is not None and now is not None and now > fence
        self.tx_takeovers.append(taken)
        inside.unlink(missing_ok=True)
        os.killpg(proc.pid, signal.SIGCONT)
        self.log.append(Fault("sigstop-in-tx", slot.name, t0, time.time() + 1))

    async def _fence(self, run_id: str) -> int | None:
        """The run's fence (None: the database did not answer)."""
        assert self.migration is not None
        query = sql.SQL("SELECT fence FROM {}.runs WHERE id = %s").format(
            sql.Identifier(self.migration.schema)
        )
        try:
            async with await psycopg.AsyncConnection.connect(self.workers.url, connect_timeout=2,
                                                             autocommit=True) as conn:  # fmt: skip
                row = await (await conn.execute(query, (run_id,))).fetchone()
        except psycopg.Error:
            return None
        return None if row is None else int(row[0])

    async def _sigterm(self, slot: Slot, kind: str = "sigterm") -> None:
        assert slot.proc is not None
        t0 = time.time()
        slot.proc.send_signal(signal.SIGTERM)
        if not await _wait_exit(slot.proc, 30):
            os.killpg(slot.proc.pid, signal.SIGKILL)
            await _wait_exit(slot.proc, 10)
        self.log.append(Fault(kind, slot.name, t0, time.time()))
        self.workers.spawn(slot)

    async def _rolling_deploy(self, slot: Slot) -> None:
        """The worker drains, as a deploy stops it; its slot's next worker runs the other
        deploy."""
        slot.deploy = "old" if slot.deploy == "new" else "new"
        await self._sigterm(slot, "rolling-deploy")

    async def _net_freeze(self, slot: Slot) -> None:
        assert self.proxy is not None
        t0 = time.time()
        await asyncio.to_thread(self.proxy.freeze)
        await asyncio.sleep(self.workers.lease_s + self.rng.uniform(1, 3))
        await asyncio.to_thread(self.proxy.thaw)
        self.log.append(Fault("net-freeze", slot.name, t0, time.time() + 1))

    async def _commit_reply_lost(self, slot: Slot) -> None:
        assert self.proxy is not None
        t0, before = time.time(), self.proxy.commits_cut
        await asyncio.to_thread(self.proxy.cut_after_commit, 1)
        until = time.monotonic() + 10
        while self.proxy.commits_cut == before and time.monotonic() < until:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(self.proxy.cut_after_commit, 0)
        if self.proxy.commits_cut != before:
            self.log.append(Fault("commit-reply-lost", slot.name, t0, time.time() + 1))

    async def restart_database(self, stop: asyncio.Event) -> None:
        """Every 5-40 s, stop PostgreSQL for 0-5 s (fast or immediate shutdown)."""
        assert self.cluster is not None
        cluster = self.cluster
        while not await _stopped(stop, self.rng.uniform(5, 40)):
            mode = self.rng.choice(["fast", "immediate"])
            t0 = time.time()
            self.db_down = True
            await asyncio.to_thread(cluster.stop, mode)
            await asyncio.sleep(self.rng.uniform(0, 5))
            await asyncio.to_thread(self._start_database)
            self.db_down = False
            self.log.append(Fault(f"postgres-stop-{mode}", "*", t0, time.time() + 1))

    async def migrate_schema(self, stop: asyncio.Event) -> None:
        """Every 10-30 s, a schema migration: a column added, and dropped 2-6 s later."""
        assert self.migration is not None
        while not await _stopped(stop, self.rng.uniform(10, 30)):
            t0 = time.time()
            if not await self.migration.add(within=20):
                continue  # kept out by locks or outages (`heal` drops what it may have left)
            await asyncio.sleep(self.rng.uniform(2, 6))
            await self.migration.drop(within=20)  # else `heal` drops it
            self.log.append(Fault("schema-migration", "schema", t0, time.time()))

    def _start_database(self) -> None:
        assert self.cluster is not None
        for attempt in range(5):
            try:
                self.cluster.start()
                return
            except subprocess.CalledProcessError:
                if attempt == 4:
                    raise
                time.sleep(1)

    async def heal(self) -> None:
        """Undo whatever is in force: the database up, the network thawed, every worker
        running (continued, or replaced)."""
        if self.db_down:
            await asyncio.to_thread(self._start_database)
            self.db_down = False
        if self.proxy is not None:
            await asyncio.to_thread(self.proxy.thaw)
            await asyncio.to_thread(self.proxy.cut_after_commit, 0)
        for slot in self.workers.slots:
            if slot.proc is not None and slot.proc.poll() is None:
                os.killpg(slot.proc.pid, signal.SIGCONT)
            else:
                self.workers.died(slot)
        if self.migration is not None and self.migration.applied:
            await self.migration.drop(within=60)


async def _stopped(stop: asyncio.Event, seconds: float) -> bool:
    """Wait `seconds` or until `stop` is set; whether it is."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
