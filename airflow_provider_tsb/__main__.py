"""``python -m airflow_provider_tsb`` runs the ``tsb`` command line."""

import sys

from airflow_provider_tsb.cli import main

sys.exit(main())
