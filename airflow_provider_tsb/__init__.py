"""airflow-provider-tsb: timestamp barriers (FLIP-276) for consistent Spark ETL over Delta Lake.

Entry points: :class:`~airflow_provider_tsb.topology.Topology` (declare a topology in a DAG
file), the operators and sensors under ``airflow_provider_tsb.operators`` /
``airflow_provider_tsb.sensors``, :class:`~airflow_provider_tsb.metastore.store.MetaStore`
(the MetaService's state) and the ``tsb`` command line.
"""

__version__ = "0.1.0"
