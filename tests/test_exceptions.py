"""The package's errors read the same everywhere: no ANSI terminal escapes from the libraries
whose errors tsb wraps (delta-rs and pyspark colour some of theirs)."""

from __future__ import annotations

import pytest

from airflow_provider_tsb.exceptions import DeltaLogError, MetastoreError, TableNotFoundError, TsbError

pytestmark = pytest.mark.unit

COLOURED = "\x1b[31mGeneric DeltaTable error\x1b[0m: \x1b[1;33mversion 7\x1b[0m not found\x1b[?25h"


@pytest.mark.parametrize("error", [TsbError, DeltaLogError, TableNotFoundError, MetastoreError])
def test_wrapped_library_errors_lose_their_ansi_escapes(error: type[TsbError]) -> None:
    raised = error(f"cannot load Delta table '/wh/t' at version 7: {COLOURED}")
    assert str(raised) == "cannot load Delta table '/wh/t' at version 7: Generic DeltaTable error: version 7 not found"
    assert "\x1b" not in repr(raised)


def test_only_text_arguments_are_touched() -> None:
    assert TsbError("a", 3).args == ("a", 3)


def test_read_option_mistakes_are_the_projects_errors_naming_the_option() -> None:
    """Issue 57 item 7: raw ValueErrors for as_of=-1 / '3' / 2.5 / True, and min_barrier=2**64 told
    the user "a job failed and rolled back"."""
    from airflow_provider_tsb.consistency import ReadOptions
    from airflow_provider_tsb.exceptions import InvalidNameError, InvalidReadOptionError, OutOfRangeError
    from airflow_provider_tsb.topology import Topology

    for value, error in ((-1, OutOfRangeError), ("3", InvalidReadOptionError), (2.5, InvalidReadOptionError),
                         (True, InvalidReadOptionError)):
        with pytest.raises(error, match=rf"read option as_of must be a barrier id .*got {value!r}"):
            ReadOptions("repeatable-read", as_of=value)  # type: ignore[arg-type]
    with pytest.raises(OutOfRangeError, match=r"read option min_barrier must be a barrier id \(an integer "
                       r"from 0 to 2\*\*63-1\), got 18446744073709551616"):
        ReadOptions("read-committed", min_barrier=2**64)
    with pytest.raises(InvalidNameError, match=r"invalid topology name 'a/b': use letters"):
        Topology("a/b")
