"""Issue 24 item 5: a reader racing barrier commits never sees a mixed cut when it pins one version.

The word count topology written barrier after barrier (``dev.wordcount_writer``) on SQLite
and PostgreSQL, served by the sharing routes under uvicorn; readers with only the official
``delta-sharing`` client read the three tables at the share's version while barriers commit
(``dev.sharing_race``; ``benchmarks/sharing_race.py`` makes 1,000 such reads).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from airflow_provider_tsb.api.sharing.cache import DEFAULT_CHECK_SECONDS
from airflow_provider_tsb.api.sharing.routes import create_sharing_app
from airflow_provider_tsb.metastore.store import MetaStore
from dev.sharing_race import race, write_profile
from dev.wordcount_writer import WORDS, WordcountWriter, cut_errors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a uvicorn server, reader threads and a writer racing for seconds: not the unit tier
def test_pinned_reads_racing_commits_see_no_mixed_cut(store: MetaStore, tmp_path: Path) -> None:
    writer = WordcountWriter(store, tmp_path / "wh")
    for _ in range(3):
        writer.commit_next()
    port = _free_port()
    app = create_sharing_app(store, seconds=60, check_seconds=DEFAULT_CHECK_SECONDS)  # the api-server's setting
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        profile = write_profile(tmp_path / "race.share", f"http://127.0.0.1:{port}/tsb/sharing")
        result = race(profile, writer, reads=40, readers=2, interval_s=0.02)
    finally:
        server.should_exit = True
        thread.join(10)
    assert result.errors == 0 and result.mixed == 0, result.examples
    assert result.reads >= 40 and result.barriers >= 5
    assert len(result.versions) >= 3, result.versions  # the readers saw the share move on


def test_a_mixed_cut_is_seen() -> None:
    """The check the race relies on: a cut with the root one barrier behind is mixed."""
    import pandas as pd

    words = pd.DataFrame({"word": ["w1"] * 100})
    counts = pd.DataFrame({"word": ["w1"], "cnt": [150]})
    count_of_counts = pd.DataFrame({"cnt": [150], "cnt2": [1]})
    frames = {WORDS: words, "tsb.wc.word_count": counts, "tsb.wc.count_of_counts": count_of_counts}
    assert cut_errors(3, frames) == [
        "words has 100 rows at barrier 3, not 150",
        "sum(word_count.cnt) = 150 but words has 100 rows",
    ]
    assert cut_errors(2, {**frames, "tsb.wc.word_count": pd.DataFrame({"word": ["w1"], "cnt": [100]})}) == []
