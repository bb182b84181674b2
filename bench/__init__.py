"""The benchmark harness: lookback against its peer, Joey NMT, on one fixed configuration.

Run it as `python -m bench headline` (bench/README.md). Kept apart from the
package: nothing in lookback imports it. `python -m bench loadtest` is the
explorer's load test, which tests/serve/test_app_under_load.py also runs.
"""
