"""Presigned S3 URLs for the files of shared tables on object storage (AWS Signature Version 4,
query-string authentication: "Authenticating Requests: Using Query Parameters").

:func:`presigned_url` signs a ``GET`` of one object with the deployment's storage options
(:mod:`airflow_provider_tsb.delta.storage`: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
optional ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (default ``us-east-1``), ``AWS_ENDPOINT_URL``
(path-style URLs, e.g. MinIO) else virtual-hosted AWS URLs). The client then fetches the file
from the store itself. Without static keys (an instance role), and for Azure and GCS, it
answers ``None`` and the api-server streams the file behind its own signed URL instead.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from urllib.parse import quote

#: longest validity of an S3 presigned URL (7 days), seconds
MAX_SECONDS = 7 * 24 * 3600


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _base(bucket: str, options: dict[str, str]) -> tuple[str, str, str]:
    """``(scheme://host, host, path prefix)`` of ``bucket``: path-style under a custom endpoint."""
    endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT")
    if endpoint:
        endpoint = endpoint.rstrip("/")
        return endpoint, endpoint.split("://", 1)[-1], f"/{bucket}"
    region = options.get("AWS_REGION") or options.get("AWS_DEFAULT_REGION") or "us-east-1"
    host = f"{bucket}.s3.amazonaws.com" if region == "us-east-1" else f"{bucket}.s3.{region}.amazonaws.com"
    return f"https://{host}", host, ""


def presign_s3(bucket: str, key: str, seconds: int, options: dict[str, str], now: datetime | None = None) -> str:
    """A presigned ``GET`` URL of ``s3://bucket/key`` valid ``seconds`` (1 .. 7 days).

    Raises:
        KeyError: ``AWS_ACCESS_KEY_ID`` or ``AWS_SECRET_ACCESS_KEY`` is missing.
    """
    seconds = max(1, min(int(seconds), MAX_SECONDS))
    at = (now or datetime.now(UTC)).astimezone(UTC)
    stamp, day = at.strftime("%Y%m%dT%H%M%SZ"), at.strftime("%Y%m%d")
    region = options.get("AWS_REGION") or options.get("AWS_DEFAULT_REGION") or "us-east-1"
    scope = f"{day}/{region}/s3/aws4_request"
    base, host, prefix = _base(bucket, options)
    path = prefix + "/" + quote(key, safe="/-_.~")
    params = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": f"{options['AWS_ACCESS_KEY_ID']}/{scope}",
        "X-Amz-Date": stamp,
        "X-Amz-Expires": str(seconds),
        "X-Amz-SignedHeaders": "host",
    }
    if options.get("AWS_SESSION_TOKEN"):
        params["X-Amz-Security-Token"] = options["AWS_SESSION_TOKEN"]
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items()))
    canonical = f"GET\n{path}\n{query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key_ = _hmac(("AWS4" + options["AWS_SECRET_ACCESS_KEY"]).encode(), day)
    for part in (region, "s3", "aws4_request"):
        key_ = _hmac(key_, part)
    signature = hmac.new(key_, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{base}{path}?{query}&X-Amz-Signature={signature}"


def presigned_url(root: str, path: str, seconds: int) -> str | None:
    """A presigned URL of file ``path`` (relative) of the table at ``root``, or ``None`` when the
    table is not on S3 or no static keys are configured (see module doc)."""
    from airflow_provider_tsb.delta.storage import configured_options

    scheme, _, rest = root.partition("://")
    if scheme.lower() not in ("s3", "s3a"):
        return None
    options = configured_options()
    if not options.get("AWS_ACCESS_KEY_ID") or not options.get("AWS_SECRET_ACCESS_KEY"):
        return None
    bucket, _, prefix = rest.partition("/")
    key = "/".join(p for p in (prefix.strip("/"), path) if p)
    return presign_s3(bucket, key, seconds, options)
