"""Test helpers (imported as ``tests.support.*``; the repository root is on ``sys.path`` for pytest).

* :mod:`~tests.support.local_airflow`: start a real Airflow 3 deployment in the background
  (also used by ``make demo``); throwaway users and passwords, development material only;
* :mod:`~tests.support.airflow_api`: the REST calls of a running deployment (DAGs, runs, logs);
* :mod:`~tests.support.airflow_harness`: one shared Airflow per test session;
* :mod:`~tests.support.airflow_fixtures`: the pytest fixtures over it (a pytest plugin);
* :mod:`~tests.support.pg`: a throwaway PostgreSQL server;
* :mod:`~tests.support.browser`: headless Chromium against the Airflow UI;
* :mod:`~tests.support.dataplane`, :mod:`~tests.support.metaservice`,
  :mod:`~tests.support.orchestration`: helpers of the test folders of the same names.
"""
