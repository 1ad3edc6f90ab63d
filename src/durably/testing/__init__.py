"""durably.testing: run workflows in tests, skip time, and replay stored histories.

Example:
    ```python
    from durably.testing import Environment

    async def test_retention() -> None:
        async with Environment(app, auto_skip=True) as env:
            handle = await retention.start(order)      # sleeps 7 days
            assert await handle.result() == "cleaned"  # in well under a second
    ```

The pytest plugin (`pytest_plugins = ["durably.testing.pytest_plugin"]`) adds an `env`
fixture built from a `durably_app` fixture of yours.

A step called without `await` fails its run ("did you forget await?"); mypy finds it
before any test runs with `--enable-error-code unused-awaitable` (`mypy --strict` alone
does not).
"""

from ._clock import SkippingClock
from ._environment import Environment
from ._replay import ReplayReport, replay

__all__ = ["Environment", "ReplayReport", "SkippingClock", "replay"]
