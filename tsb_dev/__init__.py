"""Development tooling shared by the tests, ``dev/`` and ``benchmarks/``: throwaway services and
worlds to run the provider against. Not product code: not in the wheel (pyproject.toml packages
only ``airflow_provider_tsb`` and ``tsb_examples``); scripts put the repository root on ``sys.path``.

* :mod:`~tsb_dev.local_airflow`: start a real Airflow 3 deployment in the background
  (also used by ``make demo``); throwaway users and passwords, development material only;
* :mod:`~tsb_dev.airflow_api`: the REST calls of a running deployment (DAGs, runs, logs);
* :mod:`~tsb_dev.airflow_harness`: one shared Airflow per test session or benchmark;
* :mod:`~tsb_dev.airflow_probe_plugin`: a probe app mounted next to the TSB plugin;
* :mod:`~tsb_dev.pg`: a throwaway PostgreSQL server;
* :mod:`~tsb_dev.spark_cluster`, :mod:`~tsb_dev.venvs`: a Spark standalone cluster and the bare
  Python its executors run;
* :mod:`~tsb_dev.browser`: headless Chromium against the Airflow UI;
* :mod:`~tsb_dev.e2e`: the examples' deployment (a metastore and the environment of the DAGs);
* :mod:`~tsb_dev.dataplane`: the wordcount apps, plans and reads at a barrier;
* :mod:`~tsb_dev.job_processes`, :mod:`~tsb_dev.fencing`, :mod:`~tsb_dev.lease_world`: concurrent
  job processes, fencing races and input-lease worlds in real processes.
"""
