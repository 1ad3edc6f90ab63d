"""The chaos soak: a mixed workload on worker processes under random faults, then a check of
system-wide invariants. Run it with `python -m chaos` (see `chaos/__main__.py`); it is not
part of the tests."""
