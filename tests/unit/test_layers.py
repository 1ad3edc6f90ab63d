"""The engine's layers (issue 27): the import-linter contracts of pyproject.toml hold
(arrows pointing down, no import circle in any package, type-only imports included), and
no module imports its own package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]


def test_no_module_imports_its_own_package() -> None:
    graph = grimp.build_graph("durably")
    upward = [
        f"{module} -> {imported}"
        for module in sorted(graph.modules)
        for imported in graph.find_modules_directly_imported_by(module)
        if module.startswith(imported + ".")
    ]
    assert upward == []
