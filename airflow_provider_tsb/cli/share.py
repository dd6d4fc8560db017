"""``tsb share``: Delta Sharing recipients and their profile files.

    tsb share profile SHARE --api-url URL [--token T | --user U [--password P]]
                      [--read-committed] [--expires-in SECONDS] [--name NAME] [--output FILE]
    tsb share list [SHARE] [--all] --api-url URL [...]
    tsb share revoke RECIPIENT_ID --api-url URL [...]

``profile`` creates a **recipient** (``POST /tsb/api/v1/recipients``, which needs edit access to
every DAG of the share's topologies) and writes its profile (Delta Sharing PROTOCOL.md "Profile
File Format", ``shareCredentialsVersion`` 1): the endpoint ``{Airflow base URL}/tsb/sharing``,
the recipient's own bearer token (scoped to that one share, read-only, valid on the sharing
routes only) and its ``expirationTime``. The user's Airflow JWT is used to create it and never
leaves this process. The file holds a credential and is written readable by its owner only.
``revoke`` ends a recipient at once: its token and the file URLs issued to it.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import Any

SHARING_PATH = "/tsb/sharing"
RC_SUFFIX = "--read-committed"  # airflow_provider_tsb.api.sharing.model.RC_SUFFIX (no FastAPI import here)
#: seconds in a day: ``--expires-in 7d`` style suffixes
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def expires_in_arg(value: str) -> int:
    """An ``argparse`` type: a lifetime such as ``3600``, ``90m``, ``12h`` or ``30d`` (seconds),
    from 1 s to 366 days."""
    from airflow_provider_tsb.metastore.recipients import MAX_RECIPIENT_SECONDS

    text = value.strip().lower()
    unit = _UNITS.get(text[-1:], 0)
    try:
        seconds = int(float(text[:-1] if unit else text) * (unit or 1))
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= MAX_RECIPIENT_SECONDS:
        raise argparse.ArgumentTypeError(f"{value!r} is not a lifetime: give seconds, or a number with s, m, h "
                                         "or d (e.g. 30d), from 1 s to 366 days")
    return seconds


def iso_time(ms: int) -> str:
    """Epoch ms as ISO 8601 UTC (``2026-12-08T10:00:00Z``), the profile's ``expirationTime``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_profile(api_url: str, token: str, expires_at_ms: int) -> dict[str, Any]:
    """The profile JSON for Airflow at ``api_url`` (its base URL, or the tsb API root), a
    recipient's ``token`` and its expiry (epoch ms)."""
    from airflow_provider_tsb.read.client import airflow_base

    return {"shareCredentialsVersion": 1, "endpoint": airflow_base(api_url) + SHARING_PATH,
            "bearerToken": token, "expirationTime": iso_time(expires_at_ms)}


def _client(args: argparse.Namespace) -> Any:
    """A :class:`~airflow_provider_tsb.read.client.TsbClient` with the user's Airflow JWT."""
    from airflow_provider_tsb.read.client import TsbClient, fetch_token
    from airflow_provider_tsb.read.versions import API_PASSWORD_ENV, API_TOKEN_ENV, API_USER_ENV

    if not args.api_url:
        raise ValueError("give --api-url (Airflow's base URL, e.g. http://airflow:8080) or $TSB_API_URL")
    token = args.token or os.environ.get(API_TOKEN_ENV)
    user = args.user or os.environ.get(API_USER_ENV)
    if not token:
        if not user:
            raise ValueError("give --token (an Airflow JWT) or --user (and --password) to log in")
        token = fetch_token(args.api_url, user, args.password or os.environ.get(API_PASSWORD_ENV) or "")
    return TsbClient(args.api_url, token=token)


def cmd_profile(args: argparse.Namespace) -> int:
    share = args.share + (RC_SUFFIX if args.read_committed else "")
    with _client(args) as client:
        created = client.create_recipient(share, name=args.name, expires_in=args.expires_in)
    profile = build_profile(args.api_url, created["token"], created["expires_at_ms"])
    text = json.dumps(profile, indent=2) + "\n"
    if args.output in (None, "-"):
        print(text, end="")
    else:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        print(f"wrote {args.output}: recipient {created['id']} of share {created['share']!r}, expires "
              f"{profile['expirationTime']}; read with delta_sharing.load_as_pandas("
              f"'{args.output}#{created['share']}.DATABASE.TABLE', version=BARRIER); "
              f"end it with `tsb share revoke {created['id']}`")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        found = client.recipients(args.share, include_ended=args.all)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print(f"{'ID':36}  {'SHARE':24}  {'STATE':8}  {'EXPIRES':20}  {'CREATED BY':16}  NAME")
    for r in found:
        state = "revoked" if r["revoked_at_ms"] is not None else "active" if r["active"] else "expired"
        print(f"{r['id']:36}  {r['share']:24}  {state:8}  {iso_time(r['expires_at_ms']):20}  "
              f"{r['created_by']:16}  {r['name']}")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    with _client(args) as client:
        revoked = client.revoke_recipient(args.recipient_id)
    print(f"revoked recipient {revoked['id']} of share {revoked['share']!r} at {iso_time(revoked['revoked_at_ms'])}")
    return 0


def _api_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--api-url", default=os.environ.get("TSB_API_URL"),
                   help="Airflow's base URL, e.g. http://airflow:8080 (default $TSB_API_URL)")
    p.add_argument("--token", help="your Airflow JWT (default $TSB_API_TOKEN); never written to the profile")
    p.add_argument("--user", help="no token: log in to Airflow as this user (default $TSB_API_USER)")
    p.add_argument("--password", help="the --user's password (default $TSB_API_PASSWORD)")


def register(sub: Any) -> None:
    """Add ``tsb share profile | list | revoke`` to the ``tsb`` parser."""
    p = sub.add_parser("share", help="Delta Sharing: recipients (tokens scoped to one share) and their profiles")
    share_sub = p.add_subparsers(dest="share_command", required=True, metavar="COMMAND")
    q = share_sub.add_parser("profile", help="create a recipient of a share and write its Delta Sharing profile")
    q.add_argument("share", help="the share: a topology or barrier domain")
    _api_options(q)
    q.add_argument("--read-committed", action="store_true",
                   help="share READ_COMMITTED (newest PRECOMMIT barrier; may roll back) instead of REPEATABLE_READ")
    q.add_argument("--expires-in", type=expires_in_arg, default=None,
                   help="the recipient's lifetime: seconds, or with s/m/h/d (default 7d, at most 366d)")
    q.add_argument("--name", help="a label for the recipient (default: the share and your user name)")
    q.add_argument("--output", "-o", help="profile file to write (default: print it)")
    q.set_defaults(func=cmd_profile)
    ls = share_sub.add_parser("list", help="the recipients of the shares you may edit")
    ls.add_argument("share", nargs="?", help="only this share's")
    ls.add_argument("--all", action="store_true", help="revoked and expired ones too")
    ls.add_argument("--json", action="store_true", help="print JSON")
    _api_options(ls)
    ls.set_defaults(func=cmd_list)
    rv = share_sub.add_parser("revoke", help="end a recipient now: its token and file URLs stop working")
    rv.add_argument("recipient_id", help="the recipient id (tsb share list)")
    _api_options(rv)
    rv.set_defaults(func=cmd_revoke)
