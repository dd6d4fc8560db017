"""Test-only Airflow auth manager: SimpleAuthManager with users restricted to some DAGs.

SimpleAuthManager's roles (viewer, user, op, admin) give access to all DAGs or none. Auth managers
used in production (FAB, Keycloak, AWS) grant access per DAG; this subclass does the same for the
users in :data:`DAG_PREFIXES`: they may access only the DAGs whose id starts with their prefix,
never "all DAGs" (``DagDetails(id=None)``), and otherwise keep their role. Loaded by the api-server
of ``tests/api/test_api_roles.py`` through ``[core] auth_manager``.
"""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

#: user -> prefix of the DAG ids the user may access
DAG_PREFIXES = {"alice": "team_a_", "bob": "team_a_"}


class DagPrefixAuthManager(SimpleAuthManager):
    """SimpleAuthManager whose users in :data:`DAG_PREFIXES` see only their DAGs."""

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        prefix = DAG_PREFIXES.get(user.get_name())
        if prefix is not None and (details is None or not details.id or not details.id.startswith(prefix)):
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
