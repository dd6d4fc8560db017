"""The api-server's per-process caches (issue 25 item 3): a validated bearer token's user
(:class:`~airflow_provider_tsb.api.app.TokenCache`) and the topology -> table -> DAG link
(:class:`~airflow_provider_tsb.api.airflow_access.LinkCache`); their settings' errors."""

from __future__ import annotations

import time

import jwt
import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

from airflow_provider_tsb.api.airflow_access import LinkCache
from airflow_provider_tsb.api.app import TokenCache
from airflow_provider_tsb.api.limits import config_seconds


def token(sub: str, exp: float) -> str:
    return jwt.encode({"sub": sub, "exp": int(exp)}, "k" * 32, algorithm="HS256")


def test_token_cache_keeps_a_user_until_the_tokens_exp_at_most() -> None:
    cache = TokenCache(60)
    alice = SimpleAuthManagerUser(username="alice", role="viewer")
    bob = SimpleAuthManagerUser(username="bob", role="admin")
    fresh, stale = token("alice", time.time() + 3600), token("bob", time.time() - 1)
    cache.put(fresh, alice)
    cache.put(stale, bob)
    assert cache.get(fresh) is alice
    assert cache.get(stale) is None  # expired: validated again (and refused) by Airflow
    assert cache.get(token("alice", time.time() + 1800)) is None  # another token of the same user


def test_token_cache_off() -> None:
    cache = TokenCache(0)
    t = token("alice", time.time() + 3600)
    cache.put(t, SimpleAuthManagerUser(username="alice", role="viewer"))
    assert cache.get(t) is None


def test_link_cache_loads_once_and_asks_again_for_what_was_not_found() -> None:
    calls: list[list[str]] = []

    def load(keys: list[str]) -> dict[str, str]:
        calls.append(keys)
        return {k: f"topo_of_{k}" for k in keys if k != "unregistered"}

    cache = LinkCache(60)
    assert cache.get_many("table", ["a", "b", "unregistered"], load) == {"a": "topo_of_a", "b": "topo_of_b"}
    assert cache.get_many("table", ["a", "unregistered"], load) == {"a": "topo_of_a"}
    assert calls == [["a", "b", "unregistered"], ["unregistered"]]
    off = LinkCache(0)
    off.get_many("table", ["a"], load)
    off.get_many("table", ["a"], load)
    assert calls[-2:] == [["a"], ["a"]]


@pytest.mark.parametrize("raw", ["-1", "abc", "3601", "nan"])
def test_cache_seconds_settings_are_checked(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__TSB__ACCESS_CACHE_SECONDS", raw)
    expected = rf"\[tsb\] access_cache_seconds must be a number of seconds from 0 to 3600, got '{raw}'"
    with pytest.raises(ValueError, match=expected):
        config_seconds("access_cache_seconds", 5.0)
    monkeypatch.setenv("AIRFLOW__TSB__ACCESS_CACHE_SECONDS", "0")
    assert config_seconds("access_cache_seconds", 5.0) == 0.0
