"""Settings: every knob parses, and every kind of bad value names its variable."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import override_settings

from tomori.domain.knobs import (
    KNOBS,
    KNOBS_BY_NAME,
    Knobs,
    knob,
    knob_table,
    knobs,
    load_knobs,
    read_knobs,
)
from tomori.domain.service_urls import default_bus_channel, redis_url_error
from tomori.management.commands.settings_doc import rendered_doc

ROOT = Path(__file__).resolve().parents[3] / "."


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


def test_the_table_is_derived_from_the_typed_fields() -> None:
    assert [k.name for k in KNOBS] == [
        f.name for group in Knobs.__bases__ for f in dataclasses.fields(group)
    ]
    assert {f.name for f in dataclasses.fields(Knobs)} == set(KNOBS_BY_NAME)
    hints = get_type_hints(Knobs)
    assert hints["USER_CACHE_TTL_MINUTES"] is int
    assert KNOBS_BY_NAME["USER_CACHE_TTL_MINUTES"].kind == "int"
    assert KNOBS_BY_NAME["METRICS_LOG_FILE"].kind == "path"
    assert KNOBS_BY_NAME["METRICS_LOG_FILE"].optional
    assert KNOBS_BY_NAME["METRICS_ADDRESS"].kind == "ip"
    fallback = KNOBS_BY_NAME["PERSONA_SPRITE_CACHE_TTL_MINUTES"]
    assert fallback.optional and fallback.fallback == "TOMORI_STATE_CACHE_TTL_MINUTES"


def _table_of(**fields: tuple[Any, Any]) -> Any:
    """Derive the table of a one-group Knobs-like class with `fields` (type, field)."""
    namespace: dict[str, Any] = {"GROUP": "g", "__annotations__": {}}
    for name, (annotation, declared) in fields.items():
        namespace["__annotations__"][name] = annotation
        namespace[name] = declared
    group = dataclasses.dataclass(frozen=True, kw_only=True)(type("G", (), namespace))
    return knob_table(type("Whole", (group,), {}))


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"A_URL": (int, knob("http://h", "h", kind="url"))}, "A_URL is annotated"),
        ({"A_COUNT": (str, knob(1, "h"))}, "A_COUNT's default 1"),
        ({"A_COUNT": (int, knob(0, "h", minimum=1))}, "A_COUNT's default 0"),
        ({"A_COUNT": (int, knob(None, "h"))}, "A_COUNT defaults to None"),
        ({"A_COUNT": (int, dataclasses.field())}, "A_COUNT is not declared"),
        ({"A_COUNT": (int, knob(1, "h", fallback="NOPE"))}, "falls back to NOPE"),
        ({"A_COUNT": (int | None, knob(1, "h", fallback="B"))}, "never None"),
    ],
)
def test_a_declaration_its_type_contradicts_stops_the_import(
    fields: dict[str, tuple[Any, Any]], fragment: str
) -> None:
    with pytest.raises(TypeError, match=re.escape(fragment)):
        _table_of(**fields)


def test_a_knob_outside_a_group_or_in_two_stops_the_import() -> None:
    group = dataclasses.make_dataclass(
        "G", [("A_COUNT", int, knob(1, "h"))], frozen=True, kw_only=True
    )
    group.GROUP = "g"  # type: ignore[attr-defined]
    stray = dataclasses.make_dataclass(
        "Whole", [("STRAY", int, knob(1, "h"))], bases=(group,), frozen=True
    )
    with pytest.raises(TypeError, match=r"outside a group: \['STRAY'\]"):
        knob_table(stray)
    twin = dataclasses.make_dataclass(
        "Twin", [("A_COUNT", int, knob(2, "h"))], frozen=True, kw_only=True
    )
    twin.GROUP = "t"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"in two groups: \['A_COUNT'\]"):
        knob_table(type("Whole", (group, twin), {}))


def test_a_good_declaration_gives_its_row() -> None:
    (row,) = _table_of(A_URL=(str, knob("http://h", "where", kind="url")))
    assert (row.name, row.kind, row.default, row.help, row.group) == (
        "A_URL",
        "url",
        "http://h",
        "where",
        "g",
    )


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


def test_settings_doc_lists_every_setting() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text()
    missing = [k.name for k in KNOBS if f"`{k.name}`" not in doc]
    assert missing == []


def test_settings_doc_is_the_generated_text() -> None:
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert doc == rendered_doc(), "docs/settings.md is stale: run `make docs`"


def test_settings_doc_check_fails_on_a_stale_file_naming_the_fix(
    tmp_path: Path,
) -> None:
    target = tmp_path / "settings.md"
    target.write_text(rendered_doc().replace("`10`", "`11`", 1))
    with pytest.raises(CommandError, match="stale: run `make docs`"):
        call_command("settings_doc", "--check", path=str(target))
    call_command("settings_doc", "--write", path=str(target), stdout=io.StringIO())
    out = io.StringIO()
    call_command("settings_doc", "--check", path=str(target), stdout=out)
    assert target.read_text() == rendered_doc() and "is current" in out.getvalue()


def test_settings_doc_names_the_layers_built_from_a_knob() -> None:
    row = next(
        line
        for line in rendered_doc().splitlines()
        if line.startswith("| `USER_CACHE_MAX_ENTRIES` |")
    )
    assert row.endswith("Layer: `user`. |")


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
