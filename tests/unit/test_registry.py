"""The app's registry of workflows (no database is opened)."""

from __future__ import annotations

from pathlib import Path

import pytest

from durably import ConfigurationError, Durably, WorkflowContext


def test_a_name_and_version_registered_twice_is_refused(tmp_path: Path) -> None:
    app = Durably(f"sqlite:///{tmp_path}/app.db")

    @app.workflow(name="order", version="v1")
    async def first(ctx: WorkflowContext) -> int:
        return 1

    with pytest.raises(ConfigurationError, match="order@v1"):

        @app.workflow(name="order", version="v1")
        async def second(ctx: WorkflowContext) -> int:
            return 2

    assert app.get_workflow("order", "v1") is first  # the first one stays

    @app.workflow(name="order", version="v2")
    async def third(ctx: WorkflowContext) -> int:
        return 3

    assert app.get_workflow("order") is third


async def test_a_sqlite_file_whose_folder_cannot_be_made_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    (tmp_path / "taken").write_text("a file, not a folder")
    app = Durably(f"sqlite:///{tmp_path}/taken/app.db")
    with pytest.raises(ConfigurationError, match=r"taken/app\.db"):
        await app.open()
