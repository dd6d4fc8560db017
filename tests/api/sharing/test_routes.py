"""The Delta Sharing server (issue 24) over real HTTP, read by the official ``delta-sharing`` client.

The FLIP-276 wordcount topology on real Delta tables: root ``words(word)`` -> job ``wc_job`` ->
``word_count(word, cnt)`` -> job ``cc_job`` -> ``count_of_counts(cnt, cnt2)``. Barriers 1-3 are
COMMIT; barrier 4 is WRITTEN in ``words`` and ``word_count`` only. The app is the sharing router
of the api-server without Airflow auth (a switchable policy stands for the roles), served by
uvicorn on a free port of 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import delta_sharing
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import uvicorn
from requests.exceptions import HTTPError

from airflow_provider_tsb.api.access import AllowAll, Method
from airflow_provider_tsb.api.sharing.files import sign, verify
from airflow_provider_tsb.api.sharing.routes import create_sharing_app, url_seconds
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.read.readers import read_tables_pandas
from airflow_provider_tsb.topology import Topology
from tests.support.metaservice import write
from tests.support.sharing import BATCHES, CC, COUNT, COUNTS, TOPOLOGY, WC, WORDS, build_wordcount


class Switch(AllowAll):
    """AllowAll, or (``deny``) a user who may read no DAG."""

    deny = False

    def allowed(self, method: Method, topologies):  # type: ignore[no-untyped-def]
        return set() if self.deny else set(topologies)

    def all_dags(self, method: Method) -> bool:
        return not self.deny


@dataclass
class Server:
    url: str
    profile: str
    store: MetaStore
    policy: Switch
    app: object

    def table(self, name: str, share: str = TOPOLOGY) -> str:
        _catalog, schema, table = name.split(".")
        return f"{self.profile}#{share}.{schema}.{table}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(sqlite_store: MetaStore, tmp_path: Path) -> Iterator[Server]:
    build_wordcount(sqlite_store, tmp_path / "wh")
    policy = Switch()
    app = create_sharing_app(sqlite_store, policy, seconds=60, max_body_bytes=4096)
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/tsb/sharing"
    profile = tmp_path / "tsb.share"
    profile.write_text(json.dumps({"shareCredentialsVersion": 1, "endpoint": url, "bearerToken": "unused"}))
    try:
        yield Server(url, str(profile), sqlite_store, policy, app)
    finally:
        srv.should_exit = True
        thread.join(10)


def rows(frame) -> list[tuple]:  # type: ignore[no-untyped-def]
    return sorted(tuple(r) for r in frame.itertuples(index=False))


def test_lists_and_versions(server: Server) -> None:
    client = delta_sharing.SharingClient(server.profile)
    assert [s.name for s in client.list_shares()] == [TOPOLOGY]
    tables = client.list_all_tables()
    assert sorted((t.share, t.schema, t.name) for t in tables) == [
        (TOPOLOGY, "wc", "count_of_counts"), (TOPOLOGY, "wc", "word_count"), (TOPOLOGY, "wc", "words")]
    # every table reports the newest barrier COMMIT over the share (3), not its own (4 for word_count)
    for name in (WORDS, WC, CC):
        assert delta_sharing.get_table_version(server.table(name)) == 3
    meta = delta_sharing.get_table_metadata(server.table(WC))
    assert [f["name"] for f in json.loads(meta.schema_string)["fields"]] == ["word", "cnt"]


def test_every_barrier_equals_the_tsb_readers(server: Server) -> None:
    for n in (1, 2, 3):
        shared = {t: delta_sharing.load_as_pandas(server.table(t), version=n) for t in (WORDS, WC, CC)}
        ours = read_tables_pandas([WORDS, WC, CC], as_of=n, store=server.store)
        for t in (WORDS, WC, CC):
            assert rows(shared[t]) == rows(ours[t]), (t, n)
        # FLIP-276 invariants across the tables read at one version
        assert int(shared[WC]["cnt"].sum()) == len(shared[WORDS]) == sum(len(b) for b in BATCHES[:n])
        assert int(shared[CC]["cnt2"].sum()) == len(shared[WC])
    latest = {t: delta_sharing.load_as_pandas(server.table(t)) for t in (WORDS, WC, CC)}
    assert int(latest[WC]["cnt"].sum()) == len(latest[WORDS]) == 9  # barrier 3, not word_count's 4


def test_timestamp_maps_to_the_newest_barrier_at_or_before_it(server: Server) -> None:
    ts = {k: server.store.barriers.get(TOPOLOGY, k).ts_ms for k in (1, 2, 3)}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts[2] / 1000)) + f".{ts[2] % 1000:03d}Z"
    expected = max(k for k in ts if ts[k] <= ts[2])  # 2, unless barrier 3 has the same millisecond
    frame = delta_sharing.load_as_pandas(server.table(WORDS), timestamp=stamp)
    assert len(frame) == sum(len(b) for b in BATCHES[:expected])
    early = _query(server, WORDS, {"timestamp": "2000-01-01T00:00:00Z"})
    assert early.status_code == 400 and "no barrier" in early.json()["message"]


def test_changes_between_barriers_are_the_difference_of_the_reads(server: Server) -> None:
    for name in (WORDS, WC, CC):
        for first, last in ((1, 1), (2, 3), (1, 3)):
            changes = delta_sharing.load_table_changes_as_pandas(
                server.table(name), starting_version=first, ending_version=last)
            before = Counter(rows(read_tables_pandas([name], as_of=first - 1, store=server.store)[name])
                             ) if first > 1 else Counter()
            after = Counter(rows(read_tables_pandas([name], as_of=last, store=server.store)[name]))
            data = changes.drop(columns=["_change_type", "_commit_version", "_commit_timestamp"])
            kinds = list(changes["_change_type"])
            added = Counter(r for r, k in zip(rows_unsorted(data), kinds, strict=True) if k == "insert")
            removed = Counter(r for r, k in zip(rows_unsorted(data), kinds, strict=True) if k == "delete")
            assert before + added - removed == after, (name, first, last)
            assert set(changes["_commit_version"]) <= set(range(first, last + 1))


def rows_unsorted(frame) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [tuple(r) for r in frame.itertuples(index=False)]


def _query(server: Server, name: str, body: object, **kw: object) -> httpx.Response:
    _c, schema, table = name.split(".")
    return httpx.post(f"{server.url}/shares/{TOPOLOGY}/schemas/{schema}/tables/{table}/query", json=body,
                      timeout=60, **kw)


def _get(url: str) -> httpx.Response:
    return httpx.get(url, timeout=60)  # a busy shared machine: not httpx's 5 s


def test_a_query_leases_its_versions_until_its_urls_expire(server: Server) -> None:
    r = _query(server, WC, {"version": 2})
    assert r.status_code == 200 and r.headers["delta-table-version"] == "2"
    files = [json.loads(line)["file"] for line in r.text.splitlines()[2:]]
    assert files and all(f["url"].startswith(server.url + "/files/") for f in files)
    assert 1 in server.store.leases.leased_versions(WC)  # barrier 2 is word_count's Delta version 1
    expires = files[0]["expirationTimestamp"]
    assert server.store.leases.leased_versions(WC, now=expires + 1) == set()
    assert _get(files[0]["url"]).status_code == 200
    # a short-lived query: its lease lapses with its URLs, which then answer 403
    server.app.dependency_overrides[url_seconds] = lambda: 1  # type: ignore[attr-defined]
    short = [json.loads(line)["file"] for line in _query(server, CC, {"version": 1}).text.splitlines()[2:]]
    assert 0 in server.store.leases.leased_versions(CC)
    time.sleep(1.2)
    assert 0 not in server.store.leases.leased_versions(CC)
    gone = _get(short[0]["url"])
    assert gone.status_code == 403 and gone.json()["errorCode"] == "PERMISSION_DENIED"


def test_file_urls_refuse_forgery_and_paths_outside_the_table(server: Server) -> None:
    r = _query(server, WORDS, {})
    url = json.loads(r.text.splitlines()[2])["file"]["url"]
    token = url.rsplit("/", 1)[1]
    root, path = verify(token)
    forged = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    assert _get(f"{server.url}/files/{forged}").status_code == 403
    foreign = sign(root, "", 0)
    assert _get(f"{server.url}/files/{foreign}").status_code == 403  # expired
    later = int(time.time() * 1000) + 60_000
    for bad in ("../../tsb.db", "/etc/passwd", "_delta_log/../../x"):
        assert _get(f"{server.url}/files/{sign(root, bad, later)}").status_code == 403, bad
    assert _get(f"{server.url}/files/{sign(root, path, later)}").status_code == 200
    assert _get(f"{server.url}/files/not-a-token").status_code == 403


def test_roles_and_bad_input_get_the_protocol_errors(server: Server) -> None:
    def check(r: httpx.Response, status: int, code: str, text: str = "") -> None:
        assert r.status_code == status, r.text
        assert r.json()["errorCode"] == code and text in r.json()["message"], r.text

    check(_query(server, WC, {"version": 0}), 400, "INVALID_PARAMETER_VALUE", "from 1")
    check(_query(server, WC, {"version": -1}), 400, "INVALID_PARAMETER_VALUE")
    check(_query(server, WC, {"version": 99}), 400, "INVALID_PARAMETER_VALUE", "barrier 99 was never generated")
    check(_query(server, CC, {"version": 4}), 400, "INVALID_PARAMETER_VALUE", "not COMMIT")
    check(_query(server, WC, {"version": "x"}), 400, "INVALID_PARAMETER_VALUE")
    check(_query(server, WC, {"version": 1, "timestamp": "2020-01-01T00:00:00Z"}), 400, "INVALID_PARAMETER_VALUE")
    check(_query(server, WC, {"timestamp": "yesterday"}), 400, "INVALID_PARAMETER_VALUE")
    check(_query(server, WC, {"pad": "x" * 10_000}), 413, "RESOURCE_LIMIT_EXCEEDED")
    check(_query(server, WC, [1, 2]), 400, "INVALID_PARAMETER_VALUE")
    check(_get(f"{server.url}/shares/nope/all-tables"), 404, "RESOURCE_DOES_NOT_EXIST")
    check(_get(f"{server.url}/shares/{TOPOLOGY}/schemas/nope/tables"), 404, "RESOURCE_DOES_NOT_EXIST")
    check(_get(f"{server.url}/shares/{TOPOLOGY}/schemas/wc/tables/nope/version"), 404,
          "RESOURCE_DOES_NOT_EXIST")
    check(_get(f"{server.url}/shares/{TOPOLOGY}/schemas/wc/tables/words/changes?startingVersion=3"
                    "&endingVersion=2"), 400, "INVALID_PARAMETER_VALUE")
    check(_get(f"{server.url}/shares?maxResults=x"), 400, "INVALID_PARAMETER_VALUE")
    server.policy.deny = True
    with pytest.raises(HTTPError) as err:
        delta_sharing.load_as_pandas(server.table(WC), version=1)
    assert err.value.response.status_code == 403
    check(_query(server, WC, {"version": 1}), 403, "PERMISSION_DENIED")
    check(_get(f"{server.url}/shares/nope"), 403, "PERMISSION_DENIED")  # names nothing
    assert _get(f"{server.url}/shares").json() == {"items": []}
    server.policy.deny = False


def test_expired_barrier_names_the_retention(server: Server) -> None:
    server.store.expiry.mark_expired(WC, 2, latest_version=3, consumers=False)  # keeps barriers 3, 4
    r = _query(server, WC, {"version": 1})
    assert r.status_code == 400 and r.json()["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert "keep" in r.json()["message"], r.text
    assert _query(server, WC, {"version": 3}).status_code == 200


def test_read_committed_share_serves_the_staged_files(server: Server) -> None:
    location = server.store.registry.table(CC).location
    rel = "tsb_staging/cc_job/0/4/attempt1/part-00000.parquet"
    counts = Counter(Counter(w for b in BATCHES for w in b).values())
    staged = Path(location) / rel
    staged.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"cnt": c, "cnt2": n} for c, n in sorted(counts.items())], schema=COUNTS),
                   staged)
    server.store.table_states.record_processed(CC, 4, "cc_job", {"mode": "overwrite", "files": [rel]})
    rc = "wordcount--read-committed"
    assert delta_sharing.get_table_version(server.table(CC, rc)) == 4
    assert delta_sharing.get_table_version(server.table(CC)) == 3  # REPEATABLE_READ: COMMIT only
    shared = {t: delta_sharing.load_as_pandas(server.table(t, rc)) for t in (WORDS, WC, CC)}
    ours = read_tables_pandas([WORDS, WC, CC], "read-committed", store=server.store)
    for t in (WORDS, WC, CC):
        assert rows(shared[t]) == rows(ours[t]), t
    assert int(shared[WC]["cnt"].sum()) == len(shared[WORDS]) == 11
    assert int(shared[CC]["cnt2"].sum()) == len(shared[WC])


def test_a_profile_holds_the_recipient_token_and_its_expiry(server: Server, tmp_path: Path) -> None:
    """The profile ``tsb share profile`` writes (the command itself runs on the real api-server:
    tests/api/test_api_roles.py); the official client reads with it."""
    import argparse

    from airflow_provider_tsb.cli.share import build_profile, expires_in_arg

    base = server.url[: -len("/tsb/sharing")]
    profile = build_profile(base, "tsbshare_x", 1893456000_000)
    assert profile == {"shareCredentialsVersion": 1, "endpoint": server.url, "bearerToken": "tsbshare_x",
                       "expirationTime": "2030-01-01T00:00:00Z"}
    out = tmp_path / "profile.share"
    out.write_text(json.dumps(profile))
    frame = delta_sharing.load_as_pandas(f"{out}#{TOPOLOGY}.wc.word_count", version=2)
    assert int(frame["cnt"].sum()) == 5
    assert [expires_in_arg(v) for v in ("3600", "90m", "12h", "30d")] == [3600, 5400, 43200, 2592000]
    for bad in ("0", "-1", "367d", "soon", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a lifetime"):
            expires_in_arg(bad)


def test_the_api_server_app_authenticates_the_protocol_but_not_the_file_urls() -> None:
    from fastapi.testclient import TestClient

    from airflow_provider_tsb.api.app import create_app

    client = TestClient(create_app())  # mounted at /tsb by the plugin: /tsb/sharing
    r = client.get("/sharing/shares")
    assert r.status_code == 401 and r.json()["errorCode"] == "UNAUTHENTICATED"
    r = client.get("/sharing/files/not-a-token")  # no bearer token needed; the signature is refused
    assert r.status_code == 403 and r.json()["errorCode"] == "PERMISSION_DENIED"


def test_a_table_is_shared_from_its_first_committed_barrier(server: Server) -> None:
    server.store.registry.create_job(TOPOLOGY, "late_job")
    server.store.registry.register_source("late_job", WC)
    server.store.registry.register_sink("late_job", "tsb.wc.late")  # nothing committed yet
    client = delta_sharing.SharingClient(server.profile)
    assert "late" not in {t.name for t in client.list_all_tables()}
    assert delta_sharing.get_table_version(server.table(WC)) == 3  # the share stays readable


def test_a_barrier_domain_is_one_share(server: Server, tmp_path: Path) -> None:
    """wordlen reads wordcount's root table, so both share barriers (a domain named wordcount):
    share wordcount holds both topologies' tables, share wordlen its own."""
    store, lengths = server.store, "tsb.wl.lengths"
    topo = Topology("wordlen", warehouse=str(tmp_path / "wh"))
    topo.root_table("wc.words")
    topo.job("wl_job", "wl.py", sources=["wc.words"], sinks=["wl.lengths"])
    store.registry.register_topology(topo)
    barrier = store.barriers.create("wordlen", {WORDS: 3}, run_key="r5").barrier
    assert barrier == 5
    words = [w for b in BATCHES for w in b]
    loc = {t: store.registry.table(t).location for t in (WC, CC, lengths)}
    counts = Counter(words)
    write(loc[lengths], pa.schema([("n", pa.int64())]), [(len(words),)], "overwrite", 5, "wl_job")
    store.table_states.record_written(lengths, 5, 0, "wl_job")
    write(loc[WC], COUNT, sorted(counts.items()), "overwrite", 5, "wc_job")
    store.table_states.record_written(WC, 5, 4, "wc_job")
    for k, version in ((4, 3), (5, 4)):
        write(loc[CC], COUNTS, sorted(Counter(counts.values()).items()), "overwrite", k, "cc_job")
        store.table_states.record_written(CC, k, version, "cc_job")
    client = delta_sharing.SharingClient(server.profile)
    assert [s.name for s in client.list_shares()] == ["wordcount", "wordlen"]
    listed = [(t.share, t.schema, t.name) for t in client.list_all_tables()]
    assert len(listed) == len(set(listed)), listed  # the shared root table once, not once per topology
    shared = set(listed)
    assert ("wordcount", "wl", "lengths") in shared and ("wordlen", "wc", "word_count") not in shared
    assert delta_sharing.get_table_version(server.table(lengths)) == 5
    n = delta_sharing.load_as_pandas(server.table(lengths), version=5)["n"].sum()
    assert n == len(delta_sharing.load_as_pandas(server.table(WORDS), version=5)) == len(words)
    assert delta_sharing.get_table_version(server.table(lengths, "wordlen")) == 5


def test_s3_presigned_urls_match_the_aws_example() -> None:
    """AWS's own example ("Authenticating Requests: Using Query Parameters", Signature V4)."""
    from datetime import UTC, datetime

    from airflow_provider_tsb.api.sharing.presign import presign_s3

    url = presign_s3("examplebucket", "test.txt", 86400, {
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    }, now=datetime(2013, 5, 24, tzinfo=UTC))
    assert url == (
        "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
        "AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires="
        "86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    )


@pytest.mark.slow
def test_a_table_on_s3_is_read_through_presigned_urls(server: Server, tmp_path: Path) -> None:
    """A root table on a moto S3 server: the query answers presigned URLs of the store, which
    the official client fetches from it directly."""
    from types import SimpleNamespace

    import pyarrow.fs as pafs
    from deltalake import write_deltalake

    from airflow_provider_tsb.delta import storage
    from tests.support.s3_server import start_s3_server

    (tmp_path / "s3").mkdir()
    s3 = start_s3_server(tmp_path / "s3")
    conn = SimpleNamespace(conn_type="aws", login="testing", password="testing", host=None,
                           extra_dejson={"region_name": "us-east-1", "endpoint_url": s3.endpoint})
    options = storage.storage_options_from_connection(conn)
    storage.configure(options)
    try:
        pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                          endpoint_override=s3.endpoint.split("://")[1], scheme="http",
                          allow_bucket_creation=True).create_dir("tsb-share")
        topo = Topology("remote", warehouse="s3://tsb-share/wh")
        topo.root_table("rem.events")
        topo.job("rem_job", "rem.py", sources=["rem.events"], sinks=["rem.out"])
        server.store.registry.register_topology(topo)
        location = server.store.registry.table("tsb.rem.events").location
        write_deltalake(location, pa.table({"id": [1, 2, 3]}), storage_options=options)
        server.store.barriers.create("remote", {"tsb.rem.events": 0}, run_key="s3")
        r = httpx.post(f"{server.url}/shares/remote/schemas/rem/tables/events/query", json={"version": 1}, timeout=60)
        url = json.loads(r.text.splitlines()[2])["file"]["url"]
        assert url.startswith(f"{s3.endpoint}/tsb-share/wh/") and "X-Amz-Signature=" in url, url
        frame = delta_sharing.load_as_pandas(f"{server.profile}#remote.rem.events", version=1)
        assert sorted(frame["id"]) == [1, 2, 3]
    finally:
        storage.configure(None)
        s3.stop()


@pytest.mark.slow
def test_no_input_gives_a_server_error(sqlite_store: MetaStore, tmp_path: Path) -> None:
    """schemathesis on the sharing routes' OpenAPI schema: generated valid and malformed requests
    over the wordcount share never get a 5xx (the official client retries those for minutes)."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error

    build_wordcount(sqlite_store, tmp_path / "wh")
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_sharing_app(sqlite_store, prefix=""))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 12
    calls = Counter()
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                      database=None)
            def run(case: schemathesis.Case) -> None:
                case.call_and_validate(checks=[not_a_server_error])
                calls[case.operation.label] += 1

            try:
                run()
            except Unsatisfiable:  # only plain strings: nothing to make malformed
                assert mode is GenerationMode.NEGATIVE
    assert len(calls) == 12


def test_a_version_whose_log_was_edited_is_refused(server: Server) -> None:
    """Issue 25 item 4: the sharing server verifies a version's Delta log before it lists its files."""
    from airflow_provider_tsb.delta.integrity import figures_of
    from airflow_provider_tsb.delta.log import open_table
    from tests.support.integrity import commit_file, fresh_process

    location = server.store.registry.table(WC).location
    figures = figures_of(open_table(location, 2))  # what barrier 3's commit would have recorded
    server.store.table_states.record_written(WC, 3, 2, "wc_job", figures=figures)
    assert _query(server, WC, {"version": 3}).status_code == 200
    path = commit_file(location, 2)
    lines = Path(path).read_text().splitlines()
    Path(path).write_text("\n".join(line for line in lines if not line.startswith('{"remove"')) + "\n")
    fresh_process()
    r = _query(server, WC, {"version": 3})
    assert r.status_code == 500 and r.json()["errorCode"] == "INTERNAL_ERROR", r.text  # the server's fault
    assert (f"table '{WC}', barrier 3, Delta version 2: the Delta log gives {figures.files + 1} files"
            in r.json()["message"]) and "tsb check --integrity" in r.json()["message"]
    assert _query(server, WC, {"version": 2}).status_code == 200  # the versions before it are intact
    changes = _get(f"{server.url}/shares/{TOPOLOGY}/schemas/wc/tables/word_count/changes?startingVersion=2"
                   "&endingVersion=3")  # changes verify like a query (they served the edited version)
    assert changes.status_code == 500 and "the Delta log gives" in changes.json()["message"], changes.text
    ok = _get(f"{server.url}/shares/{TOPOLOGY}/schemas/wc/tables/word_count/changes?startingVersion=1"
              "&endingVersion=2")
    assert ok.status_code == 200, ok.text


def test_share_commands_name_an_unreachable_api_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 57 item 8: ``tsb share profile --api-url http://127.0.0.1:1`` gave an httpx traceback."""
    from airflow_provider_tsb.cli import main

    for argv in (["share", "profile", "x", "--api-url", "http://127.0.0.1:1", "--token", "t"],
                 ["share", "list", "--api-url", "http://127.0.0.1:1", "--token", "t"],
                 ["share", "revoke", "some-id", "--api-url", "http://127.0.0.1:1", "--token", "t"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "unreachable" in err and "check --api-url" in err and "Traceback" not in err, err
