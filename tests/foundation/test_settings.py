"""Settings: every knob parses, and every kind of bad value names its variable."""

from __future__ import annotations

import dataclasses
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tomori.knobs import (
    KNOBS,
    KNOBS_BY_NAME,
    Knob,
    Knobs,
    check_against_table,
    knobs,
    load_knobs,
    markdown_table,
    read_knobs,
)
from tomori.service_urls import default_bus_channel, redis_url_error

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_parse_without_errors() -> None:
    values, errors = read_knobs({})
    assert errors == []
    assert values["TOMORI_STATE_CACHE_TTL_MINUTES"] == 10
    assert values["SHORT_TERM_MEMORY_TTL_HOURS"] == 12
    assert values["SHORT_TERM_MEMORY_SUMMARY_TTL_HOURS"] == 24
    assert values["SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH"] == 1500
    assert values["MEMORY_WARNING_THRESHOLD"] == 0.75
    assert values["CONTAINER_MEMORY_LIMIT_MB"] is None


def test_the_knobs_are_one_typed_frozen_object_built_from_the_environment() -> None:
    current, errors = load_knobs({"USER_CACHE_TTL_MINUTES": "45"})
    assert errors == []
    assert current.USER_CACHE_TTL_MINUTES == 45
    assert isinstance(current.SHORT_TERM_MEMORY_TTL_HOURS, float)
    assert current.METRICS_LOG_FILE is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        current.USER_CACHE_TTL_MINUTES = 1  # type: ignore[misc]


def test_path_knobs_are_paths() -> None:
    current, errors = load_knobs({"METRICS_LOG_FILE": " var/log/m.jsonl "})
    log_file = current.METRICS_LOG_FILE
    assert errors == [] and log_file == Path("var/log/m.jsonl")


def test_settings_hold_the_knobs_and_no_knob_is_a_setting_of_its_own() -> None:
    assert isinstance(settings.TOMORI_KNOBS, Knobs)
    assert knobs() is settings.TOMORI_KNOBS
    assert [k.name for k in KNOBS if hasattr(settings, k.name)] == []


def test_the_object_is_checked_against_the_table() -> None:
    check_against_table(Knobs, KNOBS)
    extra = Knob("NOT_A_FIELD", "int", 1, "", "g")
    with pytest.raises(TypeError, match="NOT_A_FIELD"):
        check_against_table(Knobs, (*KNOBS, extra))
    retyped = tuple(
        dataclasses.replace(k, kind="str") if k.name == "USER_CACHE_TTL_MINUTES" else k
        for k in KNOBS
    )
    with pytest.raises(TypeError, match="USER_CACHE_TTL_MINUTES"):
        check_against_table(Knobs, retyped)


def test_override_settings_changes_what_knobs_returns() -> None:
    default = knobs().USER_CACHE_TTL_MINUTES
    with override_settings(USER_CACHE_TTL_MINUTES=default + 7):
        overridden = knobs()
    after = knobs()
    assert overridden.USER_CACHE_TTL_MINUTES - default == 7
    assert overridden.USER_CACHE_MAX_ENTRIES == after.USER_CACHE_MAX_ENTRIES
    assert after == settings.TOMORI_KNOBS


def test_overriding_the_whole_object_changes_what_knobs_returns() -> None:
    changed = dataclasses.replace(knobs(), EMERGENCY_CACHE_CLEAR_ENABLED=False)
    with override_settings(TOMORI_KNOBS=changed):
        assert knobs() is changed
    assert knobs().EMERGENCY_CACHE_CLEAR_ENABLED is True


@pytest.mark.parametrize(
    ("name", "value"),
    [("USER_CACHE_TTL_MINUTES", "30"), ("EMERGENCY_CACHE_CLEAR_ENABLED", 1)],
)
def test_an_override_of_the_wrong_type_names_its_variable(
    name: str, value: object
) -> None:
    with (
        override_settings(**{name: value}),
        pytest.raises(ImproperlyConfigured, match=f"{name}={value!r} is invalid"),
    ):
        knobs()


def test_a_float_knob_overridden_with_an_int_is_a_float() -> None:
    with override_settings(DB_CALL_TIMEOUT_SECONDS=2):
        value = knobs().DB_CALL_TIMEOUT_SECONDS
    assert value == 2.0 and isinstance(value, float)


def test_persona_sprite_ttl_falls_back_to_tomori_state_ttl() -> None:
    current, _ = load_knobs({"TOMORI_STATE_CACHE_TTL_MINUTES": "17"})
    assert current.PERSONA_SPRITE_CACHE_TTL_MINUTES == 17
    current, _ = load_knobs({"PERSONA_SPRITE_CACHE_TTL_MINUTES": "3"})
    assert current.PERSONA_SPRITE_CACHE_TTL_MINUTES == 3


def test_the_sweep_interval_setting_is_gone() -> None:
    # Expired entries already go at the next read or write (caches.core.store):
    # an interval could only keep them longer, so there is nothing to set.
    assert "CACHE_SWEEP_INTERVAL_SECONDS" not in KNOBS_BY_NAME


@pytest.mark.parametrize("word", ["1", "true", "YES", "on"])
def test_booleans_accept_true_words(word: str) -> None:
    values, errors = read_knobs({"EMERGENCY_CACHE_CLEAR_INCLUDE_STM": word})
    assert errors == [] and values["EMERGENCY_CACHE_CLEAR_INCLUDE_STM"] is True


@pytest.mark.parametrize("word", ["0", "false", "No", "off"])
def test_booleans_accept_false_words(word: str) -> None:
    values, errors = read_knobs({"EMERGENCY_CACHE_CLEAR_ENABLED": word})
    assert errors == [] and values["EMERGENCY_CACHE_CLEAR_ENABLED"] is False


@pytest.mark.parametrize(
    ("env", "name", "fragment"),
    [
        ({"USER_CACHE_TTL_MINUTES": "thirty"}, "USER_CACHE_TTL_MINUTES", "integer"),
        ({"USER_CACHE_TTL_MINUTES": "-5"}, "USER_CACHE_TTL_MINUTES", ">= 1"),
        ({"USER_CACHE_TTL_MINUTES": "0"}, "USER_CACHE_TTL_MINUTES", ">= 1"),
        ({"MEMORY_WARNING_THRESHOLD": "1.5"}, "MEMORY_WARNING_THRESHOLD", "0.01 to 1"),
        ({"MEMORY_CRITICAL_THRESHOLD": "nan"}, "MEMORY_CRITICAL_THRESHOLD", "number"),
        (
            {"EMERGENCY_CACHE_CLEAR_ENABLED": "maybe"},
            "EMERGENCY_CACHE_CLEAR_ENABLED",
            "true",
        ),
        ({"SHARP_CONCURRENCY": "0"}, "SHARP_CONCURRENCY", "1 to 256"),
        (
            {"MEMORY_WARNING_THRESHOLD": "0.9", "MEMORY_CRITICAL_THRESHOLD": "0.8"},
            "MEMORY_WARNING_THRESHOLD",
            "below",
        ),
        (
            {"MARKDOWN_TABLE_BUTTON_TIMEOUT_MS": "7200001"},
            "MARKDOWN_TABLE_BUTTON_TIMEOUT_MS",
            "must not exceed",
        ),
        (
            {"PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH": "1001"},
            "PERSONA_SPRITE_MAX_INSTRUCTIONS_LENGTH",
            "1 to 1000",
        ),
    ],
)
def test_invalid_value_is_reported_with_its_variable(
    env: dict[str, str], name: str, fragment: str
) -> None:
    _, errors = read_knobs(env)
    assert len(errors) == 1
    assert errors[0].startswith(name) and fragment in errors[0]


def _run_manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    full_env.update(
        {"SECRET_KEY": "x", "CRYPTO_SECRET_V1": "k", "CRYPTO_SECRET_CURRENT": "1"}
    )
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_manage_check_stops_on_invalid_setting_naming_it() -> None:
    result = _run_manage("check", USER_CACHE_TTL_MINUTES="abc", SHARP_CACHE_ITEMS="-1")
    assert result.returncode != 0
    assert "caches.E001" in result.stderr
    assert "USER_CACHE_TTL_MINUTES='abc'" in result.stderr
    assert "SHARP_CACHE_ITEMS='-1'" in result.stderr


def test_manage_check_passes_on_defaults() -> None:
    result = _run_manage("check")
    assert result.returncode == 0, result.stderr


def test_production_without_secret_key_refuses_to_start() -> None:
    result = _run_manage("check", SECRET_KEY="", DEBUG="false")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_without_crypto_keys_refuses_to_start() -> None:
    result = _run_manage("check", CRYPTO_SECRET_CURRENT="", DEBUG="false")
    assert result.returncode != 0
    assert "CRYPTO_SECRET_CURRENT" in result.stderr


def test_readme_lists_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [k.name for k in KNOBS if f"`{k.name}`" not in readme]
    assert missing == []


def test_readme_carries_the_generated_tables() -> None:
    readme = (ROOT / "README.md").read_text()
    assert markdown_table() in readme


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    full_env.update(
        {"SECRET_KEY": "x", "CRYPTO_SECRET_V1": "k", "CRYPTO_SECRET_CURRENT": "1"}
    )
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_wsgi_refuses_to_load_with_an_invalid_setting() -> None:
    result = _run_python("import tomori.wsgi", USER_CACHE_TTL_MINUTES="-5")
    assert result.returncode != 0
    assert "USER_CACHE_TTL_MINUTES='-5'" in result.stderr


def test_celery_worker_refuses_to_start_with_an_invalid_setting() -> None:
    code = (
        "from tomori.celery import app\n"
        "app.worker_main(['worker', '--pool', 'solo', '-l', 'error'])\n"
    )
    result = _run_python(code, USER_CACHE_TTL_MINUTES="abc", REDIS_URL="")
    assert result.returncode != 0
    assert "USER_CACHE_TTL_MINUTES='abc'" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "url",
    ["abc", "ftp://openrouter.ai/api", "https://", "http:///api/v1", "http://x:99999"],
)
def test_url_knobs_need_an_http_url_with_a_host(url: str) -> None:
    values, errors = read_knobs({"OPENROUTER_BASE_URL": url})
    assert len(errors) == 1
    assert errors[0].startswith(f"OPENROUTER_BASE_URL={url!r} is invalid")
    assert "http:// or https:// URL with a host" in errors[0]
    assert values["OPENROUTER_BASE_URL"] == "https://openrouter.ai/api/v1"


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/api/v1", "https://openrouter.ai/api/v1", "HTTPS://h"]
)
def test_url_knobs_accept_http_and_https(url: str) -> None:
    values, errors = read_knobs({"OPENROUTER_BASE_URL": url})
    assert errors == [] and values["OPENROUTER_BASE_URL"] == url


def test_every_url_knob_is_validated_as_a_url() -> None:
    named_like_urls = [k.name for k in KNOBS if k.name.endswith("_URL")]
    assert named_like_urls and all(
        KNOBS_BY_NAME[name].kind == "url" for name in named_like_urls
    )


def test_debug_accepts_only_the_documented_words() -> None:
    assert _run_manage("check", DEBUG="yes").returncode == 0
    result = _run_manage("check", DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is invalid" in result.stderr
    assert "1/true/yes/on or 0/false/no/off" in result.stderr


def test_invalid_redis_url_is_reported_with_its_variable() -> None:
    result = _run_manage("check", REDIS_URL="abc")
    assert result.returncode != 0
    assert "caches.E001" in result.stderr and "REDIS_URL='abc'" in result.stderr


@pytest.mark.parametrize(
    ("url", "db"),
    [
        ("redis://127.0.0.1:6379/11", 11),
        ("redis://:pw@h:6379/3/", 3),
        ("rediss://h?db=4", 4),
        ("redis://h", 0),
        ("unix:///run/redis.sock?db=2", 2),
        ("", 0),
    ],
)
def test_bus_channel_default_names_the_redis_db(url: str, db: int) -> None:
    assert redis_url_error(url) is None
    assert default_bus_channel(url) == f"tomori:bus:db{db}"


def _settings_module(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, object]:
    monkeypatch.delenv("TOMORI_BUS_CHANNEL", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "tomori" / "settings.py"))


def test_deployments_on_two_dbs_of_one_redis_get_different_channels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = _settings_module(monkeypatch, REDIS_URL="redis://127.0.0.1:6379/11")
    second = _settings_module(monkeypatch, REDIS_URL="redis://127.0.0.1:6379/12")
    assert first["TOMORI_BUS_CHANNEL"] == "tomori:bus:db11"
    assert second["TOMORI_BUS_CHANNEL"] == "tomori:bus:db12"
    assert first["KNOB_ERRORS"] == second["KNOB_ERRORS"] == []


def test_an_explicit_bus_channel_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    values = _settings_module(
        monkeypatch, REDIS_URL="redis://127.0.0.1:6379/11", TOMORI_BUS_CHANNEL="ours"
    )
    assert values["TOMORI_BUS_CHANNEL"] == "ours"
