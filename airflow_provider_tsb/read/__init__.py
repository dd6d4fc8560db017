"""Reading tables consistently: resolve the versions of a set of tables at a consistency level
(FLIP-276 "Data Consistency Type"), locally or through the REST API (:mod:`.versions`), and read
them with Spark, Arrow or pandas (:mod:`.readers`, :mod:`.version_reads`).

Example::

    from airflow_provider_tsb.read.readers import read_tables_pandas

    tables = read_tables_pandas(["flights.flights_enriched", "flights.carrier_daily_delay"])
"""
