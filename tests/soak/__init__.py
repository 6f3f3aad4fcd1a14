"""The combined soak (issue 26): every fault at once under load, and a history checker.

``python -m tests.soak --duration 1800 [--security sasl_ssl]`` (``make soak``) runs it; the
smoke run in ``make test`` is ``tests/soak/test_smoke.py``. Modules: ``history`` (what a
worker logs, byte-packed), ``worker`` (one producer process of one API and mode),
``nemesis`` (the faults), ``checker`` (reads everything back and classifies each record),
``figures`` (latency, gaps and memory from the run directory),
``harness`` (starts and stops it all, and reports).
"""
