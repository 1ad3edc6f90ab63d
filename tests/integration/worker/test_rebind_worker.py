"""`app.rebind()` points an app at another database before it connects. A worker made
before it would keep the old database's store: its leases renewed and its steps recorded
there, while the app claims in the new one. So rebind refuses once a worker exists."""

from __future__ import annotations

import pytest

from durably import Durably


def test_rebind_refuses_once_a_worker_was_made(tmp_path: object) -> None:
    app = Durably(f"sqlite:///{tmp_path}/a.db")
    app.worker()
    with pytest.raises(RuntimeError, match="worker"):
        app.rebind(f"sqlite:///{tmp_path}/b.db")
    assert str(app.url).endswith("a.db")


def test_rebind_before_the_worker_is_the_worker_s_database(tmp_path: object) -> None:
    app = Durably(f"sqlite:///{tmp_path}/a.db").rebind(f"sqlite:///{tmp_path}/b.db")
    worker = app.worker()
    assert worker.app.store is app.store
