"""A thin client (issue 31 item 9): a process with `Durably(url)` and no workflow code,
which starts a run by name and prints the run as JSON:
`python -m tests.apps.thin NAME INPUT_JSON [IDEMPOTENCY_KEY]`. An error prints its type
and message and exits 1."""

from __future__ import annotations

import json
import os
import sys

from durably import Durably, DurablyError


def main(name: str, input_json: str, key: str | None) -> int:
    app = Durably(os.environ["DURABLY_DATABASE_URL"])
    try:
        handle = app.sync.start(name, json.loads(input_json), idempotency_key=key)
        print(json.dumps(app.sync.get_run(handle.run_id).to_dict(), default=str))
        return 0
    except DurablyError as exc:
        print(f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        app.sync.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
