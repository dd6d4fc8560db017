"""The benchmarks of ``airflow-provider-tsb`` (docs/benchmarks.md), one module each, run from the
repository's root as ``.venv/bin/python -m benchmarks.NAME [options]`` (``make bench`` runs the
main ones).

Every benchmark is built on one harness, :mod:`benchmarks.harness`: its argument parser
(``parser``), one percentile definition (``percentile``, ``median``), one load reading (``load``,
``LoadWatch``) and one result line (``report``: a JSON object, then the same figures as
``key=value`` on the last line of stdout, ``load=`` always among them). The modules that are no
benchmark of their own are shared helpers: ``flights_bench`` (the flights topology run as the
operator runs it), ``plain`` (the no-bookkeeping baseline, also a ``spark-submit`` application),
``wrk_clients`` (``wrk`` as HTTP clients) and ``apps/`` (the Spark applications of the generated
topologies).
"""
