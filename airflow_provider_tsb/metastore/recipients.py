"""Delta Sharing recipients: bearer tokens of their own, scoped to one share, expiring, revocable.

A recipient is what a Delta Sharing server hands out instead of a user's identity (Delta
Sharing PROTOCOL.md "Profile File Format": ``bearerToken``, ``expirationTime``). Its token:

* is random (:data:`TOKEN_PREFIX` + 32 bytes of :func:`secrets.token_urlsafe`), shown once when
  the recipient is created, and stored only as its SHA-256 digest;
* opens one share, read-only, on the sharing routes only: it is no Airflow JWT, so Airflow's
  API and the tsb REST API refuse it;
* expires (``expires_at_ms``) and can be revoked (``revoked_at_ms``); both end it at once, and
  so do the file URLs issued to it (:mod:`airflow_provider_tsb.api.sharing.files`).

Times are epoch milliseconds (UTC).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import select, update

from airflow_provider_tsb.exceptions import OutOfRangeError, RecipientTokenError, UnknownRecipientError
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.models import RecipientRow
from airflow_provider_tsb.metastore.records import now_ms

#: the start of every recipient token: tells it apart from an Airflow JWT at a glance
TOKEN_PREFIX = "tsbshare_"
#: default lifetime of a recipient, seconds (7 days)
DEFAULT_RECIPIENT_SECONDS = 7 * 24 * 3600
#: longest lifetime of a recipient, seconds (366 days)
MAX_RECIPIENT_SECONDS = 366 * 24 * 3600


def token_digest(token: str) -> str:
    """The hex SHA-256 of a bearer token: what the metastore keeps of it."""
    return hashlib.sha256(token.encode()).hexdigest()


def is_recipient_token(token: str) -> bool:
    """Whether ``token`` has the shape of a recipient token (not whether it is valid)."""
    return token.startswith(TOKEN_PREFIX)


@dataclass(frozen=True)
class Recipient:
    """A Delta Sharing recipient (never its token: only the digest is stored).

    Attributes:
        id: the recipient id (a UUID), what ``tsb share revoke`` takes.
        name: a label for people (default: the share and the creator).
        share: the one share its token opens.
        created_by: the Airflow user who created it.
        created_at_ms, expires_at_ms: epoch ms.
        revoked_at_ms: epoch ms of its revocation, ``None`` while not revoked.
    """

    id: str
    name: str
    share: str
    created_by: str
    created_at_ms: int
    expires_at_ms: int
    revoked_at_ms: int | None

    def active(self, now: int | None = None) -> bool:
        """Neither revoked nor expired at ``now`` (epoch ms, default the current time)."""
        return self.revoked_at_ms is None and self.expires_at_ms > (now_ms() if now is None else now)


def _record(row: RecipientRow) -> Recipient:
    return Recipient(row.id, row.name, row.share, row.created_by, row.created_at_ms, row.expires_at_ms,
                     row.revoked_at_ms)


def check_recipient_seconds(seconds: object) -> int:
    """``seconds`` as a recipient lifetime: an integer from 1 to :data:`MAX_RECIPIENT_SECONDS`.

    Raises:
        OutOfRangeError: names ``expires_in`` and the value.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds != seconds \
            or not 1 <= seconds <= MAX_RECIPIENT_SECONDS:
        raise OutOfRangeError(f"expires_in must be a number of seconds from 1 to {MAX_RECIPIENT_SECONDS} "
                              f"(366 days), got {seconds!r}")
    return int(seconds)


class RecipientManager:
    """Delta Sharing recipients in the metastore (see module docstring).

    Args:
        core: the metastore core.

    Example::

        recipient, token = store.recipients.create("wordcount", created_by="alice", seconds=86400)
        store.recipients.authenticate(token).share      # 'wordcount'
        store.recipients.revoke(recipient.id)           # the token and its file URLs stop at once
    """

    def __init__(self, core: MetastoreCore) -> None:
        self.core = core

    def create(self, share: str, *, created_by: str, seconds: int = DEFAULT_RECIPIENT_SECONDS,
               name: str | None = None) -> tuple[Recipient, str]:
        """A new recipient of ``share`` and its bearer token (returned once, never stored).

        The caller checks that ``share`` exists and that ``created_by`` may share it (the REST
        route does: edit access to every DAG of the share's topologies).

        Raises:
            OutOfRangeError: ``seconds`` is not from 1 to :data:`MAX_RECIPIENT_SECONDS`.
            ValueError: an empty or over-long share, name or creator.
        """
        seconds = check_recipient_seconds(seconds)
        label = name if name is not None else f"{share} by {created_by}"
        for field, value, limit in (("share", share, 300), ("name", label, 250), ("created_by", created_by, 250)):
            if not isinstance(value, str) or not value.strip() or len(value) > limit:
                raise ValueError(f"recipient {field} must be a non-empty text of at most {limit} characters, "
                                 f"got {value!r}")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = now_ms()
        row = RecipientRow(id=str(uuid.uuid4()), name=label, share=share, token_sha256=token_digest(token),
                           created_by=created_by, created_at_ms=now, expires_at_ms=now + seconds * 1000,
                           revoked_at_ms=None)
        with self.core.transaction(write=True) as s:
            s.add(row)
            s.flush()
            return _record(row), token

    def get(self, recipient_id: str) -> Recipient:
        """The recipient ``recipient_id`` (active or not).

        Raises:
            UnknownRecipientError: no recipient has this id.
        """
        with self.core.transaction() as s:
            row = s.get(RecipientRow, recipient_id)
            if row is None:
                raise UnknownRecipientError(f"no Delta Sharing recipient has id {recipient_id!r}; "
                                            "`tsb share list` shows them")
            return _record(row)

    def list(self, share: str | None = None, *, include_ended: bool = False) -> list[Recipient]:
        """Recipients (of ``share`` when given), oldest first; revoked and expired ones only with
        ``include_ended``."""
        with self.core.transaction() as s:
            query = select(RecipientRow).order_by(RecipientRow.created_at_ms, RecipientRow.id)
            if share is not None:
                query = query.where(RecipientRow.share == share)
            found = [_record(r) for r in s.scalars(query)]
        now = now_ms()
        return [r for r in found if include_ended or r.active(now)]

    def revoke(self, recipient_id: str) -> Recipient:
        """End recipient ``recipient_id`` now: its token and the file URLs issued to it are
        refused from the next request on. Revoking twice keeps the first time.

        Raises:
            UnknownRecipientError: no recipient has this id.
        """
        with self.core.transaction(write=True) as s:
            s.execute(update(RecipientRow).where(RecipientRow.id == recipient_id, RecipientRow.revoked_at_ms.is_(None))
                      .values(revoked_at_ms=now_ms()))
        return self.get(recipient_id)

    def authenticate(self, token: str) -> Recipient:
        """The active recipient whose token is ``token``.

        Raises:
            RecipientTokenError: the token is unknown, expired or revoked (the message says which).
        """
        with self.core.transaction() as s:
            row = s.scalar(select(RecipientRow).where(RecipientRow.token_sha256 == token_digest(token)))
            found = _record(row) if row is not None else None
        if found is None:
            raise RecipientTokenError("this Delta Sharing token is not known to this server: "
                                      "ask the share's owner for a new profile (tsb share profile)")
        if found.revoked_at_ms is not None:
            raise RecipientTokenError("this Delta Sharing token was revoked: ask the share's owner for a new profile")
        if not found.active():
            raise RecipientTokenError("this Delta Sharing token has expired: ask the share's owner for a new profile")
        return found
