"""The benchmark harness: lookback against its peer, Joey NMT, on one fixed configuration.

Run it as `python -m bench` (bench/README.md). Kept apart from the tests
and from the package: nothing in lookback imports it.
"""
