"""Development tooling (not shipped: the wheel packages only ``airflow_provider_tsb`` and
``tsb_examples``, which lives in ``dags/tsb_examples/``): the demo (``python -m dev.demo``,
``make demo``), README screenshots, the
docstring checker of ``make lint``, probes of the protocol's costs, and the throwaway services
and worlds the tests and ``benchmarks/`` run the provider against. Scripts put the repository
root on ``sys.path``.

* :mod:`~dev.local_airflow`: start a real Airflow 3 deployment in the background (also used by
  ``make demo``); throwaway users and passwords, development material only;
* :mod:`~dev.airflow_api`: the REST calls of a running deployment (DAGs, runs, logs);
* :mod:`~dev.airflow_harness`: one shared Airflow per test session or benchmark;
* :mod:`~dev.airflow_probe_plugin`: a probe app mounted next to the TSB plugin;
* :mod:`~dev.pg`: a throwaway PostgreSQL server;
* :mod:`~dev.spark_cluster`, :mod:`~dev.venvs`: a Spark standalone cluster and the bare Python its
  executors run;
* :mod:`~dev.browser`: headless Chromium against the Airflow UI;
* :mod:`~dev.e2e`: the examples' deployment (a metastore and the environment of the DAGs);
* :mod:`~dev.dataplane`: the wordcount apps, plans and reads at a barrier;
* :mod:`~dev.job_processes`, :mod:`~dev.fencing`, :mod:`~dev.lease_world`: concurrent job
  processes, fencing races and input-lease worlds in real processes.
"""
