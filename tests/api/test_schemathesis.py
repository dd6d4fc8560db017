"""Property-based API test: no client input gives a 500 (schemathesis on the served OpenAPI schema).

The app is the MetaService router + exception handlers over a migrated metastore (SQLite and
PostgreSQL) holding the FLIP-276 shop topology. Every operation of the schema gets valid
(positive) and malformed (negative) generated requests; examples per operation and mode are
bounded so the whole run stays well under two minutes.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from airflow_provider_tsb.api.routes import create_metaservice_app
from airflow_provider_tsb.metastore.store import MetaStore
from tests.support.metaservice import build_shop

pytestmark = pytest.mark.slow  # hundreds of generated requests

MAX_EXAMPLES = 25


def test_no_server_errors(store: MetaStore, tmp_path) -> None:
    build_shop(store, str(tmp_path))
    app = create_metaservice_app(store)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {op.label for op in operations}
    assert {"POST /versions", "GET /delays", "GET /freshness", "GET /topologies"} <= labels and len(operations) == 11
    calls: dict[tuple[str, str], int] = {}
    runs = 0
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if mode is GenerationMode.NEGATIVE and operation.label == "GET /topologies":
                continue  # no parameter: nothing to make invalid
            _property_test(operation, mode, calls)()
            runs += 1
    assert sum(calls.values()) >= runs * 5  # every operation was really exercised


def _property_test(operation: object, mode: GenerationMode, calls: dict) -> object:
    checks = [not_a_server_error]
    if mode is GenerationMode.POSITIVE:
        checks.append(response_schema_conformance)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True, database=None)
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=checks)
        key = (case.operation.label, mode.value)
        calls[key] = calls.get(key, 0) + 1

    return run
