"""Continue-as-new (SPEC §4.23): workflow code ends its run and starts the next run of the
same workflow and version, with an empty history, by raising `ContinueAsNew`.

It is a `BaseException`, as `asyncio.CancelledError` is: `except Exception` in workflow
code does not swallow it. The engine (execution/ending.py, `Ending.continue_as_new`) ends
the run `continued` and inserts the next one in one fenced transaction (store/continues.py).
"""

from __future__ import annotations

from typing import Any, NoReturn


class ContinueAsNew(BaseException):
    """Raised by `ctx.continue_as_new(input)`: the run ends `continued` and the next run of
    its chain starts with `input`. Re-raise it if you catch `BaseException`.

    Attributes:
        input: the next run's input (validated as a start's is: a bad one fails the run
            with `InvalidInput` instead of continuing).
    """

    def __init__(self, input: Any = None) -> None:
        super().__init__("the run continues as new")
        self.input = input


def continue_as_new(input: Any = None) -> NoReturn:
    """End this run and start the next run of its chain with `input` (see `ContinueAsNew`)."""
    raise ContinueAsNew(input)
