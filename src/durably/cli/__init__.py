"""The `durably` command line (SPEC §5): `main` is its entry point (`cli.main`)."""

from .main import app, hoist_global_options, main

__all__ = ["app", "hoist_global_options", "main"]
