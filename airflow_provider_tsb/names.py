"""Logical table names: ``catalog.database.table``.

Each part is an identifier (letters, digits and underscores, not starting with a digit, at
most 128 characters). Path separators, quotes, wildcards and whitespace are refused so that a
name can never escape its warehouse directory or be mistaken for a pattern.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from airflow_provider_tsb.exceptions import InvalidNameError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_JOB_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]{0,249}")


class TableName(NamedTuple):
    """A parsed ``catalog.database.table`` name."""

    catalog: str
    database: str
    table: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.database}.{self.table}"


def parse_table_name(name: str, default_catalog: str = "tsb") -> TableName:
    """Parse and validate a table name.

    Args:
        name: ``catalog.database.table``, or ``database.table`` which gets ``default_catalog``.
        default_catalog: catalog used for two-part names.

    Returns:
        The three validated parts.

    Raises:
        InvalidNameError: the name has the wrong number of parts or a part is not an
            identifier; the message quotes the name and the offending part.
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"table name must be a string, got {type(name).__name__}: {name!r}")
    parts = name.split(".")
    if len(parts) == 2:
        parts = [default_catalog, *parts]
    if len(parts) != 3:
        raise InvalidNameError(
            f"invalid table name {name!r}: expected 'catalog.database.table' "
            f"(or 'database.table'), got {len(parts)} part(s)"
        )
    for part in parts:
        if not _IDENTIFIER.fullmatch(part):
            raise InvalidNameError(
                f"invalid table name {name!r}: part {part!r} is not an identifier "
                "(letters, digits and '_', not starting with a digit; no path separators, "
                "quotes, wildcards or whitespace)"
            )
    return TableName(*parts)


def normalize_table_name(name: str, default_catalog: str = "tsb") -> str:
    """Return the canonical three-part form of ``name`` (see :func:`parse_table_name`)."""
    return str(parse_table_name(name, default_catalog))


def validate_job_id(job_id: str, *, what: str = "job id") -> str:
    """Validate a job id (or, with ``what``, a topology or barrier-domain name: the same rule):
    an identifier that may also contain ``-``, at most 250 characters.

    Raises:
        InvalidNameError: naming ``what``, the value and the rule it breaks.
    """
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        why = " (it is also the Delta txn appId of the job's commits)" if what == "job id" else ""
        raise InvalidNameError(
            f"invalid {what} {job_id!r}: use letters, digits, '_' and '-', starting with a letter or '_', at most "
            f"250 characters{why}"
        )
    return job_id
