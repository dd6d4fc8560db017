"""The package's errors read the same everywhere: no ANSI terminal escapes from the libraries
whose errors tsb wraps (delta-rs and pyspark colour some of theirs)."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.delta.errors import TableNotFoundError
from airflow_provider_tsb.exceptions import DeltaLogError, MetastoreError, TsbError

pytestmark = pytest.mark.unit

COLOURED = "\x1b[31mGeneric DeltaTable error\x1b[0m: \x1b[1;33mversion 7\x1b[0m not found\x1b[?25h"


@pytest.mark.parametrize("error", [TsbError, DeltaLogError, TableNotFoundError, MetastoreError])
def test_wrapped_library_errors_lose_their_ansi_escapes(error: type[TsbError]) -> None:
    raised = error(f"cannot load Delta table '/wh/t' at version 7: {COLOURED}")
    assert str(raised) == "cannot load Delta table '/wh/t' at version 7: Generic DeltaTable error: version 7 not found"
    assert "\x1b" not in repr(raised)


def test_only_text_arguments_are_touched() -> None:
    assert TsbError("a", 3).args == ("a", 3)
