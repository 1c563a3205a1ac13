"""The model rules: Discord ids, text limits, control characters, JSON (issue 14)."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction

from caches.layers._support import parse_int, parse_int_pair
from tomori.admin.domain import ModelConfigForm
from tomori.admin.hostile import SafeModelMultipleChoiceField
from tomori.domain import models as m
from tomori.domain.knobs import KNOBS_BY_NAME
from tomori.domain.models import validation as v
from tomori.domain.models.fields import (
    BoundedTextField,
    SafeJSONField,
    SafeJSONFormField,
    SnowflakeField,
    SnowflakeFormField,
)

MAX = 2**63 - 1
DOMAIN_FIELDS = [
    (model, f)
    for model in apps.get_app_config("tomori").get_models()
    for f in model._meta.concrete_fields
]
SNOWFLAKES = [(model, f) for model, f in DOMAIN_FIELDS if f.name.endswith("_disc_id")]
FREE_TEXT = [
    (model, f)
    for model, f in DOMAIN_FIELDS
    if isinstance(f, models.CharField | models.TextField) and not f.choices
]


def _name(value: Any) -> str:
    return (
        getattr(value, "__name__", None) or getattr(value, "name", None) or str(value)
    )


def _messages(exc: pytest.ExceptionInfo[ValidationError]) -> str:
    return " ".join(exc.value.messages)


# ------------------------------------------------------------------ Discord ids


@pytest.mark.parametrize(("model", "f"), SNOWFLAKES, ids=_name)
def test_every_discord_id_field_is_a_snowflake_with_a_check(model, f) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(f, SnowflakeField), f"{model.__name__}.{f.name}"
    checked = [
        c
        for c in model._meta.constraints
        if isinstance(c, models.CheckConstraint) and f.name in str(c.condition)
    ]
    assert checked, f"{model.__name__}.{f.name} has no CHECK constraint"


@pytest.mark.parametrize("value", [-5, 0, MAX + 1, 2**64])
def test_a_bad_discord_id_is_rejected_with_a_clear_message(value: int) -> None:
    with pytest.raises(ValidationError) as exc:
        SnowflakeField().clean(value, None)
    assert "A Discord id is from 1 to 9223372036854775807" in _messages(exc)


@pytest.mark.parametrize("value", [1, 1001, 10**17, MAX])
def test_a_positive_snowflake_is_accepted(value: int) -> None:
    assert SnowflakeField().clean(value, None) == value


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("-5", "negative"),
        ("0", "positive"),
        ("9" * 400, "too large"),
        (str(MAX + 1), "too large"),
        ("１２３", "ASCII digits"),
        ("1.0", "ASCII digits"),
        ("+5", "ASCII digits"),
        ("1_000", "ASCII digits"),
        ("abc", "ASCII digits"),
        ("\x00", "ASCII digits"),
    ],
)
def test_a_typed_discord_id_must_be_ascii_digits_in_range(
    typed: str, message: str
) -> None:
    with pytest.raises(ValidationError) as exc:
        SnowflakeFormField().clean(typed)
    assert message in _messages(exc)
    with pytest.raises(ValueError, match=message):
        parse_int(typed)


@pytest.mark.parametrize("typed", ["1", " 42 ", str(MAX)])
def test_a_typed_id_in_range_is_accepted(typed: str) -> None:
    assert SnowflakeFormField().clean(typed) == int(typed)
    assert parse_int(typed) == int(typed)


def test_an_id_pair_obeys_the_id_rule() -> None:
    assert parse_int_pair("1:22") == (1, 22)
    for bad in ["1:２", "0:5", "1:" + "9" * 400, "1:2:3"]:
        with pytest.raises(ValueError):
            parse_int_pair(bad)


@pytest.fixture
def server() -> m.Server:
    return m.Server.objects.create(server_disc_id=1001, name="alpha")


@pytest.mark.django_db
@pytest.mark.parametrize("value", [0, -5])
def test_the_database_rejects_a_non_positive_discord_id(
    server: m.Server, value: int
) -> None:
    channel = m.WhitelistedChannel.objects.create(server=server, channel_disc_id=7)
    user = m.User.objects.create(user_disc_id=8)
    writes = [
        lambda: m.WhitelistedChannel.objects.filter(pk=channel.pk).update(
            channel_disc_id=value
        ),
        lambda: m.User.objects.filter(pk=user.pk).update(user_disc_id=value),
        lambda: m.Server.objects.create(server_disc_id=value),
        lambda: m.WhitelistedRole.objects.create(server=server, role_disc_id=value),
        lambda: m.PersonalSpotlight.objects.create(
            server=server, user=user, channel_disc_id=value
        ),
    ]
    for write in writes:
        with pytest.raises(IntegrityError), transaction.atomic():
            write()


# ------------------------------------------------------------------ text


@pytest.mark.parametrize(("model", "f"), FREE_TEXT, ids=_name)
def test_every_free_text_field_has_a_length_and_a_control_character_rule(
    model, f
) -> None:  # type: ignore[no-untyped-def]
    where = f"{model.__name__}.{f.name}"
    assert f.max_length, f"{where} has no max_length"
    with pytest.raises(ValidationError, match="control character"):
        f.run_validators("a\x07b")
    with pytest.raises(ValidationError, match="at most"):
        f.run_validators("a" * (f.max_length + 1))
    if isinstance(f, models.TextField):
        assert isinstance(f, BoundedTextField), where
        checked = [c for c in model._meta.constraints if f.name in str(c)]
        assert checked, f"{where} has no length CHECK"


@pytest.mark.parametrize("text", ["a\nb", "a\tb", "a\x07b", "\x00", "\x1b[31m", "\x9f"])
def test_control_characters_are_rejected_in_one_line_text(text: str) -> None:
    with pytest.raises(ValidationError) as exc:
        v.validate_single_line(text)
    assert "control character U+" in _messages(exc)


@pytest.mark.parametrize("text", ["\x00", "a\x0bb", "\x7f", "\x1b"])
def test_control_characters_other_than_newlines_are_rejected_in_multiline_text(
    text: str,
) -> None:
    with pytest.raises(ValidationError, match="control character"):
        v.validate_multiline(text)


@pytest.mark.parametrize("text", ["Tomori", "héllo 🌸", "👩‍💻 zero-width join", "東方"])
def test_printable_text_is_accepted(text: str) -> None:
    v.validate_single_line(text)
    v.validate_multiline(text + "\nline two\r\n\tindented")


@pytest.mark.django_db
def test_a_persona_with_bad_text_is_rejected_field_by_field(server: m.Server) -> None:
    persona = m.Persona(
        server=server,
        name="Tom\x07ori",
        system_prompt="x" * (v.PROMPT_MAX + 1),
        avatar_url="https://x.test/\x07.png",
    )
    with pytest.raises(ValidationError) as exc:
        persona.full_clean()
    errors = exc.value.message_dict
    assert "U+0007" in errors["name"][0]
    assert "8000 characters" in errors["system_prompt"][0]
    assert "avatar_url" in errors
    persona.name, persona.avatar_url = "Tomori", "https://x.test/a.png"
    persona.system_prompt = "You are Tomori.\n\n\tBe kind." + "x" * 7000
    persona.full_clean()


@pytest.mark.django_db
def test_the_database_rejects_text_past_its_limit(server: m.Server) -> None:
    persona = m.Persona.objects.create(server=server, name="Tomori")
    config = m.ServerModelConfig.objects.create(server=server, api_key="sk-1")
    writes = [
        lambda: m.Persona.objects.filter(pk=persona.pk).update(
            system_prompt="x" * (v.PROMPT_MAX + 1)
        ),
        lambda: m.ServerModelConfig.objects.filter(pk=config.pk).update(
            api_key="k" * (v.API_KEY_MAX + 1)
        ),
        lambda: m.PresetPersona.objects.create(
            name="p", description="d" * (v.DESCRIPTION_MAX + 1)
        ),
    ]
    for write in writes:
        with pytest.raises(IntegrityError), transaction.atomic():
            write()
    m.Persona.objects.filter(pk=persona.pk).update(system_prompt="x" * v.PROMPT_MAX)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key", ["sk key", "sk-\x00", "sk-\nmore", "clé", "k" * (v.API_KEY_MAX + 1)]
)
def test_a_bad_api_key_is_a_form_error(key: str) -> None:
    form = ModelConfigForm(data={"temperature": "1", "new_api_key": key})
    assert not form.is_valid()
    assert "new_api_key" in form.errors


@pytest.mark.django_db
def test_a_printable_api_key_is_accepted() -> None:
    form = ModelConfigForm(data={"temperature": "1", "new_api_key": "sk-or-v1-AbC_9"})
    assert form.is_valid(), form.errors


def test_the_summary_limit_is_the_ceiling_of_its_knob() -> None:
    assert (
        KNOBS_BY_NAME["SHORT_TERM_MEMORY_MAX_SUMMARY_LENGTH"].maximum == v.SUMMARY_MAX
    )


# ------------------------------------------------------------------ JSON

DEEP = "[" * 30_000 + "]" * 30_000  # json.loads raises RecursionError on it


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": "\\u0000"}', "NUL"),
        ('{"\\u0000": 1}', "NUL"),
        ('["a\\u0000b"]', "NUL"),
        ("NaN", "NaN"),
        ("[Infinity]", "Infinity"),
        ("[-Infinity]", "Infinity"),
        ('{"a": 1e400}', "finite"),
        (DEEP, "nested"),
        ("[" * 50_000 + "]" * 50_000, "characters"),
        ("[" * 33 + "]" * 33, "nested"),
        ("1" + "0" * 5000, "too large"),
        (str(2**64), "2^63-1"),
        ("{", "valid JSON"),
        ("[" + "1," * 40_000 + "1]", "characters"),
    ],
    ids=lambda value: value[:20] if isinstance(value, str) else value,
)
def test_bad_json_is_a_form_error(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as exc:
        SafeJSONFormField().clean(text)
    assert message in _messages(exc)


def test_an_invalid_json_input_renders_back_as_typed() -> None:
    field = SafeJSONFormField()
    assert field.bound_data(DEEP, None) == DEEP
    assert field.prepare_value(field.bound_data("NaN", None)) == "NaN"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, "x", null, true]}',
        "[" * 32 + "]" * 32,
        str(MAX),
        '"text"',
        '{"emoji": "🌸", "newline": "a\\nb"}',
    ],
)
def test_sane_json_is_accepted(text: str) -> None:
    SafeJSONFormField().clean(text)


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), 2**64, "a\x00", {"\x00": 1}, [[object()]]]
)
def test_bad_python_json_values_are_rejected(value: Any) -> None:
    with pytest.raises(ValidationError):
        SafeJSONField().run_validators(value)


@pytest.mark.django_db
def test_mcp_json_fields_must_have_their_shape(server: m.Server) -> None:
    config = m.GuildMcpServerConfig(server=server, name="tools", url="https://x.test")
    config.tool_names, config.display_metadata = {"a": 1}, ["not", "an", "object"]
    with pytest.raises(ValidationError) as exc:
        config.full_clean()
    assert set(exc.value.message_dict) == {"tool_names", "display_metadata"}
    config.tool_names, config.display_metadata = ["search", 5], {}
    with pytest.raises(ValidationError, match="list of strings"):
        config.full_clean()
    config.tool_names, config.display_metadata = ["search", "fetch"], {"icon": "x"}
    config.full_clean()


# ------------------------------------------------------------------ operator keys


@pytest.mark.parametrize("key", ["１２３", "1:" + "9" * 20, str(MAX + 1), "a\x07", "é"])
def test_a_bad_operator_key_is_rejected(key: str) -> None:
    with pytest.raises(ValidationError):
        v.validate_operator_key(key)


@pytest.mark.parametrize(
    "key", ["42", "gemini-2.0-flash", "shortterm:user:1:2", f"1:{MAX}", "1:22::?"]
)
def test_a_sane_operator_key_passes_the_form_check(key: str) -> None:
    v.validate_operator_key(key)


@pytest.mark.django_db
@pytest.mark.parametrize("raw", ["9" * 400, str(MAX + 1), "abc"])
def test_a_many_to_many_id_the_key_cannot_hold_is_a_form_error(raw: str) -> None:
    """Checked before any query: SQLite cannot even bind a 400-digit integer."""
    field = SafeModelMultipleChoiceField(queryset=m.Persona.objects.all())
    with pytest.raises(ValidationError, match="is not a valid value"):
        field.clean([raw])
