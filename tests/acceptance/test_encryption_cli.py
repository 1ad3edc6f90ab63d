"""Encryption at rest (SPEC §4.24) from outside: `DURABLY_CODEC_KEYS` gives a `durably
worker` and the CLI their keys; a run started by `durably start` and run by a worker
process leaves no plaintext in the database, and the CLI without the key shows
"<encrypted>" (`show`, `runs`, `signals`, as text and as JSON) and exits 0."""

from __future__ import annotations

from typing import Any

from durably import FernetCodec
from durably.core.sealing import ENCRYPTED, KEYS_ENV
from tests.acceptance.conftest import Procs
from tests.helpers import eventually_sync, scaled
from tests.integration.store.test_encryption import _dump

SECRET = 987654321987123
SIGNAL = "S3CR3T-CLI-SIGNAL-q5"


def test_worker_and_cli_take_their_keys_from_the_environment(procs: Procs, tmp_path: Any) -> None:
    old, new = FernetCodec.generate_key(), FernetCodec.generate_key()
    keys = {KEYS_ENV: f"{new},{old}"}
    procs.worker("w1", **keys)
    started = procs.json("start", "burst", "--input", str(SECRET), **keys)
    procs.json("signal", "nobody-waits", "--data", f'"{SIGNAL}"', **keys)

    def completed() -> bool:
        return bool(procs.json("show", started["run_id"], **keys)["run"]["status"] == "completed")

    eventually_sync(completed, scaled(30), "the run to complete")
    shown = procs.json("show", started["run_id"], **{KEYS_ENV: new})  # the first key wrote
    assert (shown["run"]["input"], shown["run"]["output"]) == (SECRET, SECRET)
    blind = procs.json("show", started["run_id"], **{KEYS_ENV: ""})
    assert (blind["run"]["input"], blind["run"]["output"]) == (ENCRYPTED, ENCRYPTED)
    assert [r["input"] for r in procs.json("runs", **{KEYS_ENV: ""})] == [ENCRYPTED]
    assert [s["data"] for s in procs.json("signals", **{KEYS_ENV: ""})] == [ENCRYPTED]
    assert [s["data"] for s in procs.json("signals", **keys)] == [SIGNAL]
    text = procs.cli("show", started["run_id"], DURABLY_CODEC_KEYS="").stdout
    assert ENCRYPTED in text and str(SECRET) not in text
    procs.cli("runs", DURABLY_CODEC_KEYS="")
    dump = _dump(procs.url, tmp_path)
    assert str(SECRET).encode() not in dump and SIGNAL.encode() not in dump
