"""REST routes that create, list and revoke Delta Sharing recipients (``/tsb/api/v1/recipients``).

A recipient (:mod:`airflow_provider_tsb.metastore.recipients`) is a bearer token of its own for
one share: what ``tsb share profile`` writes into a profile file instead of the user's Airflow
JWT. These routes take the Airflow user's JWT (never a recipient token) and Airflow's roles:

* ``POST /recipients`` ``{"share", "name"?, "expires_in"?}`` (201): needs **edit** access to
  every DAG of the share's topologies, as a lease or a registration does: sharing a topology's
  data outside Airflow is a change to who reads it, not a read. The answer holds the token, once.
* ``GET /recipients?share=&include_ended=``: the recipients of the shares the user may edit
  (never a token).
* ``DELETE /recipients/{id}``: revoke (edit access to the recipient's share); its token and
  the file URLs issued to it are refused from the next request on.

A share that no longer exists is checked like Airflow's "all DAGs" permission.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_tsb.api.access import EDIT, TopologyAccess
from airflow_provider_tsb.api.errors import TsbRoute
from airflow_provider_tsb.api.routes import get_access, get_store
from airflow_provider_tsb.api.sharing.model import resolve_share
from airflow_provider_tsb.exceptions import AccessDeniedError, UnknownShareError
from airflow_provider_tsb.metastore.recipients import DEFAULT_RECIPIENT_SECONDS, MAX_RECIPIENT_SECONDS, Recipient
from airflow_provider_tsb.metastore.store import MetaStore

router = APIRouter(tags=["tsb-sharing-recipients"], route_class=TsbRoute)
StoreDep = Annotated[MetaStore, Depends(get_store)]
AccessDep = Annotated[TopologyAccess, Depends(get_access)]


class RecipientIn(BaseModel):
    """Body of ``POST /recipients``."""

    model_config = ConfigDict(extra="forbid")

    share: str = Field(min_length=1, max_length=300, description="the share: a topology or barrier domain "
                       "(with --read-committed for that variant)")
    name: str | None = Field(None, min_length=1, max_length=250, description="a label for people")
    expires_in: int = Field(DEFAULT_RECIPIENT_SECONDS, ge=1, le=MAX_RECIPIENT_SECONDS,
                            description="seconds until the token expires (default 7 days, at most 366)")


class RecipientOut(BaseModel):
    """A recipient (times in epoch ms; ``revoked_at_ms`` null while not revoked)."""

    id: str
    name: str
    share: str
    created_by: str
    created_at_ms: int
    expires_at_ms: int
    revoked_at_ms: int | None
    active: bool


class RecipientCreated(RecipientOut):
    """A new recipient with its bearer token (shown once: only its digest is stored)."""

    token: str


def _out(r: Recipient) -> RecipientOut:
    return RecipientOut(id=r.id, name=r.name, share=r.share, created_by=r.created_by, created_at_ms=r.created_at_ms,
                        expires_at_ms=r.expires_at_ms, revoked_at_ms=r.revoked_at_ms, active=r.active())


def _require_edit(store: MetaStore, access: TopologyAccess, share: str) -> str:
    """The share's canonical name, once the user may edit every DAG of its topologies.

    Raises:
        AccessDeniedError: the user may not (403).
        UnknownShareError: no such share (404; to a user with the "all DAGs" edit right only).
    """
    try:
        found = resolve_share(store, share)
    except UnknownShareError:
        access.require_all_dags(EDIT)
        raise
    access.require(EDIT, found.topologies)
    return found.name


def _user_name(request: Request) -> str:
    user = getattr(request.state, "tsb_user", None)
    return str(user.get_name()) if user is not None else "anonymous"


@router.post("/recipients", status_code=201)
def create_recipient(request: Request, store: StoreDep, access: AccessDep, body: RecipientIn) -> RecipientCreated:
    """Create a recipient of ``body.share`` (edit access to the share's DAGs); the answer holds
    its token, once."""
    share = _require_edit(store, access, body.share)
    recipient, token = store.recipients.create(share, created_by=_user_name(request), seconds=body.expires_in,
                                               name=body.name)
    return RecipientCreated(**_out(recipient).model_dump(), token=token)


@router.get("/recipients")
def list_recipients(store: StoreDep, access: AccessDep,
                    share: Annotated[str | None, Query(min_length=1, max_length=300)] = None,
                    include_ended: bool = False) -> list[RecipientOut]:
    """The recipients (of ``share``) whose share the user may edit; revoked and expired ones
    with ``include_ended``."""
    found = store.recipients.list(share, include_ended=include_ended)
    allowed: dict[str, bool] = {}
    for name in {r.share for r in found}:
        try:
            _require_edit(store, access, name)
            allowed[name] = True
        except (AccessDeniedError, UnknownShareError):  # not the user's to see, or a share since removed
            allowed[name] = False
    return [_out(r) for r in found if allowed[r.share]]


@router.delete("/recipients/{recipient_id}")
def revoke_recipient(store: StoreDep, access: AccessDep,
                     recipient_id: Annotated[str, Path(min_length=1, max_length=36)]) -> RecipientOut:
    """Revoke a recipient (edit access to its share's DAGs): its token and file URLs stop now."""
    recipient = store.recipients.get(recipient_id)
    _require_edit(store, access, recipient.share)
    return _out(store.recipients.revoke(recipient_id))
