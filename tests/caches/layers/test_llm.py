"""LLM layer: warming, synchronous reads, readiness, failed warms and re-warming."""

from __future__ import annotations

import asyncio

import pytest

from caches.layers import llm as layer
from caches.layers.llm import (
    ensure_llm_cache,
    get_cached_default_llm,
    get_cached_llm,
    get_cached_llms_by_provider,
    get_llm,
    initialize_llm_cache,
    is_llm_cache_ready,
)
from caches.registry import registry
from tomori.domain.repositories import llms as llms_repo

pytestmark = pytest.mark.django_db


@pytest.fixture
def models(make_llm):
    return {
        "flash": make_llm(
            provider="Google", codename="gemini-2.5-flash", is_default=True
        ),
        "pro": make_llm(provider="google", codename="gemini-2.5-pro"),
        "old": make_llm(provider="google", codename="gemini-1.0", is_active=False),
        "kayra": make_llm(provider="novelai", codename="kayra-v1", is_default=True),
    }


def test_warm_then_reads_run_no_query(run, models, django_assert_num_queries):
    assert not is_llm_cache_ready()
    assert run(initialize_llm_cache) is True
    assert is_llm_cache_ready()
    with django_assert_num_queries(0):
        assert get_cached_llm(models["pro"].id) == models["pro"]
        assert get_cached_llm(10**9) is None
        codenames = [m.codename for m in get_cached_llms_by_provider("GOOGLE")]
        assert codenames == ["gemini-2.5-flash", "gemini-2.5-pro"]
        assert get_cached_default_llm("google") == models["flash"]
        assert get_cached_default_llm("NovelAI") == models["kayra"]
        assert get_cached_default_llm("nobody") is None
        assert run(ensure_llm_cache) is True


def test_failed_warm_keeps_the_previous_map(run, models, db_down):
    run(initialize_llm_cache)
    db_down(llms_repo, "list_llms")
    assert run(initialize_llm_cache) is False
    assert is_llm_cache_ready()
    assert get_cached_llm(models["pro"].id) == models["pro"]


def test_failed_first_warm_is_not_ready(run, db_down):
    db_down(llms_repo, "list_llms")
    assert run(ensure_llm_cache) is False
    assert not is_llm_cache_ready()


def test_reload_op_keeps_serving_and_rewarms_on_next_async_access(
    run, models, make_llm
):
    run(initialize_llm_cache)
    new = make_llm(provider="google", codename="gemini-3-pro-preview")
    assert registry.apply("llm", "reload") == 0
    assert get_cached_llm(models["pro"].id) == models["pro"]
    assert get_cached_llm(new.id) is None
    assert run(get_llm, new.id) == new


def test_key_op_drops_the_llm_and_marks_a_rewarm(run, models):
    run(initialize_llm_cache)
    llms_repo.llm_update(llm_id=models["pro"].id, display_name="Pro")
    assert registry.apply("llm", "key", models["pro"].id) == 1
    assert get_cached_llm(models["pro"].id) is None
    assert [m.codename for m in get_cached_llms_by_provider("google")] == [
        "gemini-2.5-flash"
    ]
    run(ensure_llm_cache)
    assert get_cached_llm(models["pro"].id).display_name == "Pro"


def test_clear_makes_it_unready_until_warmed(run, models):
    run(initialize_llm_cache)
    assert registry.apply("llm", "all") == 4
    assert not is_llm_cache_ready() and get_cached_default_llm("google") is None
    assert run(ensure_llm_cache) is True
    assert get_cached_default_llm("google") == models["flash"]


def test_deleted_rows_leave_on_rewarm(run, models):
    run(initialize_llm_cache)
    from tomori.domain.models import Llm

    Llm.objects.filter(pk=models["old"].id).delete()
    run(initialize_llm_cache)
    assert get_cached_llm(models["old"].id) is None


def test_concurrent_warms_share_one_load(run, models, count_calls):
    loads = count_calls(llms_repo, "list_llms")

    async def burst() -> list[bool]:
        return await asyncio.gather(*(initialize_llm_cache() for _ in range(10)))

    assert run(burst) == [True] * 10
    assert loads.calls == 1


def test_llm_cache_is_preserved_in_an_emergency():
    assert str(registry.entry("llm").policy) == "preserve"
    assert layer.NAME == "llm"
