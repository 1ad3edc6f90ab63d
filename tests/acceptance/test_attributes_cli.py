"""`durably start --attr` and `durably runs --attr KEY=VALUE` (SPEC §4.24, §5): values read
as JSON when they parse, else as text; repeated, all must match; `show` prints them."""

from __future__ import annotations

from tests.acceptance.conftest import Procs


def test_runs_are_started_and_found_by_their_attributes(procs: Procs) -> None:
    later = ("--input", '{"id": "f1"}', "--available-at", "+1h")
    a = procs.json("start", "acquire", *later, "--attr", "customer=c-1", "--attr", "amount=30")
    b = procs.json("start", "acquire", "--input", '{"id": "f2"}', "--available-at", "+1h",
                   "--attr", "customer=c-1", "--attr", "amount=\"30\"")  # fmt: skip

    def found(*attrs: str) -> list[str]:
        args = [arg for attr in attrs for arg in ("--attr", attr)]
        return [r["run_id"] for r in procs.json("runs", *args)]

    assert found("customer=c-1") == [b["run_id"], a["run_id"]]
    assert found("customer=c-1", "amount=30") == [a["run_id"]]  # a number
    assert found('amount="30"') == [b["run_id"]]  # a string, quoted as JSON
    assert found("customer=c-2") == []
    shown = procs.json("show", a["run_id"])
    assert shown["run"]["attributes"] == {"customer": "c-1", "amount": 30}
    assert 'customer="c-1"' in procs.cli("show", a["run_id"]).stdout
    for bad in ("customer", "=x", "k=[1]"):
        done = procs.cli("runs", "--attr", bad, check=False)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
