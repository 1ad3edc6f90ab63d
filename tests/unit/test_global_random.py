"""The engine never draws from the global `random` generator: it is the program's (seeded
by a user for reproducible runs, watched by hypothesis, which fails a test whose strategy
draws see it move), and the engine draws from threads of its own. A full-suite run failed
`test_value_fidelity` so: a deadlock retry's jitter drew from it during a draw."""

from __future__ import annotations

import ast
from pathlib import Path

import durably

SRC = Path(durably.__file__).parent


def _global_draws(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "random"
            and node.func.attr not in ("Random", "SystemRandom")
        ):
            found.append(f"{path.relative_to(SRC)}:{node.lineno} random.{node.func.attr}()")
    return found


def test_no_module_draws_from_the_global_generator() -> None:
    draws = [d for path in sorted(SRC.rglob("*.py")) for d in _global_draws(path)]
    assert draws == []
