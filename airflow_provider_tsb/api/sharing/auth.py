"""Who a Delta Sharing request is: a recipient's token, or an Airflow user's JWT.

The sharing routes of the api-server (:mod:`airflow_provider_tsb.api.sharing.routes`) authenticate
with :func:`airflow_provider_tsb.api.app.sharing_user`:

* a bearer token starting with :data:`~airflow_provider_tsb.metastore.recipients.TOKEN_PREFIX`
  is a **recipient**'s (:mod:`airflow_provider_tsb.metastore.recipients`): it must be active
  (not expired, not revoked), and the request may then read its one share and nothing else
  (:func:`authenticate_recipient`, :class:`RecipientAccess`: read-only);
* any other credential is Airflow's (``get_current_user``: the JWT or the UI's cookie), with
  the user's roles, as on the tsb REST API.

Only the sharing routes accept a recipient token: it is no JWT, so Airflow's API and the tsb
REST API answer 401 to it. File URLs name who they were issued to (:func:`principal_of`), and
:func:`check_principal` refuses a URL whose recipient was revoked or expired, or whose Airflow
token was revoked (logged out), before its own expiry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from fastapi import HTTPException, Request, status
from starlette.concurrency import run_in_threadpool

from airflow_provider_tsb.api.access import READ, READ_DENIED, Method, TopologyAccess
from airflow_provider_tsb.api.routes import get_store
from airflow_provider_tsb.exceptions import AccessDeniedError, RecipientTokenError, UnknownRecipientError
from airflow_provider_tsb.metastore.recipients import Recipient

if TYPE_CHECKING:
    from airflow_provider_tsb.api.sharing.files import FileGrant
    from airflow_provider_tsb.metastore.store import MetaStore

RECIPIENT = "recipient:"
JWT = "jwt:"


class RecipientAccess(TopologyAccess):
    """The policy of a recipient's request: read its one share, nothing else, change nothing.

    Args:
        recipient: the authenticated recipient.
        store: the metastore (to find the share's topologies).
    """

    api_root_tables = False

    def __init__(self, recipient: Recipient, store: MetaStore) -> None:
        self.recipient = recipient
        self.share_scope = recipient.share
        self.store = store
        self._topologies: frozenset[str] | None = None

    def _share_topologies(self) -> frozenset[str]:
        if self._topologies is None:
            from airflow_provider_tsb.api.sharing.model import resolve_share
            from airflow_provider_tsb.exceptions import UnknownShareError

            try:
                self._topologies = frozenset(resolve_share(self.store, self.recipient.share).topologies)
            except UnknownShareError:
                self._topologies = frozenset()
        return self._topologies

    def allowed(self, method: Method, topologies: Iterable[str]) -> set[str]:
        """Read: the given topologies that belong to the recipient's share; edit: none."""
        return set(topologies) & self._share_topologies() if method == READ else set()

    def dags_of(self, topology: str) -> frozenset[str]:
        return frozenset()

    def dags_of_tables(self, tables: Iterable[str]) -> Mapping[str, frozenset[str]]:
        return {}

    def all_dags(self, method: Method) -> bool:
        return False


def require_share(access: TopologyAccess, name: str) -> None:
    """Refuse (403) a share other than the one a recipient's token is scoped to."""
    scope = access.share_scope
    if scope is not None and name.lower() != scope.lower():
        raise AccessDeniedError(READ_DENIED)


async def authenticate_recipient(request: Request, token: str) -> Recipient:
    """The active recipient of ``token``, kept in ``request.state.tsb_recipient``.

    Raises:
        HTTPException: 401 for an unknown, expired or revoked token (the message says which),
            as Airflow's own authentication does for a bad JWT.
    """
    store = await get_store(request)
    try:
        recipient = await run_in_threadpool(store.recipients.authenticate, token)
    except RecipientTokenError as exc:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, str(exc)) from None
    request.state.tsb_recipient = recipient
    return recipient


def principal_of(request: Request) -> str | None:
    """Who the file URLs of this request are issued to: ``recipient:<id>``, ``jwt:<jti>`` of the
    Airflow user's bearer token, or ``None`` (a cookie session or an app without login)."""
    recipient: Recipient | None = getattr(request.state, "tsb_recipient", None)
    if recipient is not None:
        return RECIPIENT + recipient.id
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token or getattr(request.state, "tsb_user", None) is None:
        return None
    import jwt

    try:
        jti = jwt.decode(token, options={"verify_signature": False}).get("jti")  # verified by Airflow already
    except jwt.PyJWTError:
        return None
    return JWT + str(jti) if jti else None


def check_principal(store: MetaStore, grant: FileGrant) -> None:
    """Refuse a file URL whose recipient is revoked or expired, or whose Airflow token was
    revoked (logged out), before the URL's own expiry.

    Raises:
        ForbiddenFileError: names which (never whose).
    """
    from airflow_provider_tsb.exceptions import ForbiddenFileError

    principal = grant.principal
    if principal is None:
        return
    if principal.startswith(RECIPIENT):
        try:
            recipient = store.recipients.get(principal[len(RECIPIENT):])
        except UnknownRecipientError:
            raise ForbiddenFileError("this file URL's recipient no longer exists") from None
        if not recipient.active():
            raise ForbiddenFileError("this file URL's recipient was revoked or has expired: "
                                     "ask the share's owner for a new profile")
    elif principal.startswith(JWT):
        from airflow.models.revoked_token import RevokedToken

        if RevokedToken.is_revoked(principal[len(JWT):]):
            raise ForbiddenFileError("this file URL's Airflow token was revoked (logged out): log in and query again")
