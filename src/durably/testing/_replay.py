"""placeholder"""

from typing import Any


class ReplayReport: ...


def replay(app: Any, history: Any) -> ReplayReport:
    raise NotImplementedError
