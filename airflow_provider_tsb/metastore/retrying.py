"""Every manager call of a :class:`~.store.MetaStore` rides out a metastore outage.

:class:`RetryingManager` stands in front of one manager and runs each of its public methods
through :func:`~.retry.call_with_retry`: a call that fails because the database cannot be
reached, dropped the connection or timed out (:mod:`.deadline`) is tried again with capped
exponential backoff until the budget is spent, then fails with
:class:`~.retry.MetastoreUnavailableError` naming the call, the database and the seconds
tried, the jobs' message. So barrier generation, the emitter's checks, the sensor's trigger,
the api-server and the CLI hold one rule. Inside
:meth:`~.base.MetastoreCore.one_transaction` a call is not retried on its own: the enclosing
call retries the whole transaction.

Each manager call is one transaction that commits or leaves nothing, so a retry after a
failure before the commit repeats nothing. A retry after a commit whose answer was lost
repeats a call that is idempotent (registrations, states, upserts, a barrier with its run
key) or harmless (a lease that expires by itself, an ad-hoc barrier without a run key at the
same root versions: an empty epoch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.retry import call_with_retry

M = TypeVar("M")


class RetryingManager:
    """``manager``'s public methods, retried through an outage for up to ``budget_s`` seconds.

    Args:
        manager: a metastore manager (``store.barriers``' :class:`~.barriers.BarrierManager`, ...).
        core: the core ``manager`` runs its transactions on.
        budget_s: seconds a call is retried (``0``: tried once).
        label: the manager's attribute on the store (``"barriers"``), for messages.
    """

    def __init__(self, manager: object, core: MetastoreCore, budget_s: float, label: str) -> None:
        self._manager, self._core, self._budget_s, self._label = manager, core, budget_s, label

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._manager, name)
        if name.startswith("_") or not callable(attr):
            return attr
        what = f"call store.{self._label}.{name}"

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._core.in_one_transaction:
                return attr(*args, **kwargs)
            return call_with_retry(lambda: attr(*args, **kwargs), what, self._core.shown_url(),
                                   budget_s=self._budget_s)

        return call

    def __repr__(self) -> str:
        return f"RetryingManager({self._manager!r}, budget_s={self._budget_s})"


def retrying(manager: M, core: MetastoreCore, budget_s: float, label: str) -> M:
    """``manager`` behind a :class:`RetryingManager` (typed as the manager); ``manager`` itself
    when ``budget_s`` is 0."""
    if not budget_s:
        return manager
    wrapped: Callable[..., Any] | Any = RetryingManager(manager, core, budget_s, label)
    return wrapped  # type: ignore[no-any-return]
