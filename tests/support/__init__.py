"""Test-only helpers (imported as ``tests.support.*``; the repository root is on ``sys.path`` for pytest).

* :mod:`~tests.support.airflow_fixtures`: the pytest fixtures over :mod:`dev.airflow_harness` (a pytest plugin);
* :mod:`~tests.support.metaservice`, :mod:`~tests.support.orchestration`, :mod:`~tests.support.guide`:
  helpers of the test folders of the same names;
* :mod:`~tests.support.s3_server`: a local S3 server.

The helpers ``dev/`` and ``benchmarks/`` share with the tests (a throwaway PostgreSQL, a local
Airflow, a Spark standalone cluster, ...) live in :mod:`dev`, outside the test package
(tests/test_architecture.py checks that ``dev/`` and ``benchmarks/`` never import ``tests``).
"""
