"""A script that uses `app.sync` and never calls `close()` exits cleanly."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import scaled

SCRIPT = """
import sys
from durably import Durably

app = Durably(sys.argv[1])

@app.workflow(name="w", version="v1")
async def w(ctx, x: int) -> int:
    return x

handle = app.sync.start("w", 1)
print(app.sync.get_run(handle.run_id).status)
"""


def test_sync_facade_exits_without_close(db_url: str) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, db_url], capture_output=True,
                          text=True, timeout=scaled(60))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pending"
    assert "Task was destroyed" not in done.stderr
    assert done.stderr == ""
