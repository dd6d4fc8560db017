"""``tsb share profile``: a Delta Sharing profile file for reading a topology's consistent cut.

    tsb share profile TOPOLOGY --api-url URL [--token T | --user U [--password P]]
                      [--read-committed] [--output FILE]

The profile (Delta Sharing PROTOCOL.md "Profile File Format", ``shareCredentialsVersion`` 1)
holds the endpoint ``{Airflow base URL}/tsb/sharing`` and the user's Airflow JWT as the bearer
token (``expirationTime``: the token's ``exp``). The command checks that the user may read the
share (``GET /shares/{share}``) before writing it; the file holds a credential and is written
readable by its owner only. Print the share's table URLs with ``delta_sharing.SharingClient``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from datetime import UTC, datetime
from typing import Any

SHARING_PATH = "/tsb/sharing"
RC_SUFFIX = "--read-committed"  # airflow_provider_tsb.api.sharing_model.RC_SUFFIX (no FastAPI import here)


def token_expiry(token: str) -> str | None:
    """The ISO 8601 UTC time of a JWT's ``exp`` claim (not verified: for the profile only), or ``None``."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return datetime.fromtimestamp(int(claims["exp"]), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def build_profile(api_url: str, token: str) -> dict[str, Any]:
    """The profile JSON for Airflow at ``api_url`` (its base URL, or the tsb API root) and ``token``."""
    from airflow_provider_tsb.read.client import airflow_base

    profile: dict[str, Any] = {"shareCredentialsVersion": 1, "endpoint": airflow_base(api_url) + SHARING_PATH,
                               "bearerToken": token}
    expiry = token_expiry(token)
    if expiry:
        profile["expirationTime"] = expiry
    return profile


def cmd_profile(args: argparse.Namespace) -> int:
    import httpx

    from airflow_provider_tsb.read.client import fetch_token
    from airflow_provider_tsb.read.versions import API_PASSWORD_ENV, API_TOKEN_ENV, API_USER_ENV

    if not args.api_url:
        raise ValueError("give --api-url (Airflow's base URL, e.g. http://airflow:8080) or $TSB_API_URL")
    token = args.token or os.environ.get(API_TOKEN_ENV)
    user = args.user or os.environ.get(API_USER_ENV)
    if not token:
        if not user:
            raise ValueError("give --token (an Airflow JWT) or --user (and --password) to log in")
        token = fetch_token(args.api_url, user, args.password or os.environ.get(API_PASSWORD_ENV) or "")
    profile = build_profile(args.api_url, token)
    share = args.topology + (RC_SUFFIX if args.read_committed else "")
    r = httpx.get(f"{profile['endpoint']}/shares/{share}", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    if r.status_code != 200:
        raise ValueError(f"share {share!r} at {profile['endpoint']} answered {r.status_code}: {r.text[:300]}")
    text = json.dumps(profile, indent=2) + "\n"
    if args.output in (None, "-"):
        print(text, end="")
    else:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        print(f"wrote {args.output}: read with delta_sharing.load_as_pandas('{args.output}#{share}.DATABASE.TABLE', "
              "version=BARRIER)")
    return 0


def register(sub: Any) -> None:
    """Add ``tsb share profile`` to the ``tsb`` parser."""
    p = sub.add_parser("share", help="Delta Sharing: a profile file to read a topology's consistent cut")
    share_sub = p.add_subparsers(dest="share_command", required=True, metavar="COMMAND")
    q = share_sub.add_parser("profile", help="write a Delta Sharing profile (endpoint, token) for a topology")
    q.add_argument("topology", help="the topology (or barrier domain) to share")
    q.add_argument("--api-url", default=os.environ.get("TSB_API_URL"),
                   help="Airflow's base URL, e.g. http://airflow:8080 (default $TSB_API_URL)")
    q.add_argument("--token", help="Airflow JWT (default $TSB_API_TOKEN)")
    q.add_argument("--user", help="no token: log in to Airflow as this user (default $TSB_API_USER)")
    q.add_argument("--password", help="the --user's password (default $TSB_API_PASSWORD)")
    q.add_argument("--read-committed", action="store_true",
                   help="share READ_COMMITTED (newest PRECOMMIT barrier; may roll back) instead of REPEATABLE_READ")
    q.add_argument("--output", "-o", help="profile file to write (default: print it)")
    q.set_defaults(func=cmd_profile)
