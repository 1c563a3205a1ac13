"""Hostile input never makes the admin answer 500, and is never stored.

Everything is generated from the admin registry (`admin.site._registry`):
each ModelAdmin's list filters, date drill-down, search box, autocomplete
fields, actions, add and change forms, plus the cache dashboard's operator
forms and the admin's custom views. A model registered tomorrow is fuzzed
without editing this file; a custom admin view must be listed in
CUSTOM_VIEWS (a test fails until it is). Values are sampled per field type
(not the full product) to keep the run short.

The client is built with `raise_request_exception=False`, so a view's
exception becomes the 500 response a browser would get, and every response's
status is checked.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest
from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import RelatedFieldWidgetWrapper
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import models
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from caches.messages import AnyCommand, WorkerReply
from caches.registry import registry

pytestmark = pytest.mark.django_db

NUL = "a\x00b"
CONTROL = "bell\x07\x1b[31m"
HUGE = "x" * 100_000
TEXT = [NUL, CONTROL, HUGE]
IDS = ["-5", "0", "9" * 400, "１２３", "abc", "\x00", "1e400", str(2**64)]
FLOATS = ["NaN", "inf", "-1e400", "1" * 5000, "abc"]
JSONS = [
    '{"a": "\\u0000"}',
    '{"\\u0000": 1}',
    "NaN",
    "[1, Infinity]",
    "[" * 50_000 + "]" * 50_000,
    "[" * 33 + "]" * 33,
    "1" + "0" * 5000,
    '{"a": 1e400}',
    "{",
]
URLS = ["http://x.test/\x07", "https://" + "a" * 100_000 + ".test", "javascript:x"]
DATES = ["abc", "99999-01-01", "2026-02-30", "\x00", "25:61"]
CHOICE_LISTS: list[list[str]] = [["abc"], ["\x00"], ["-5"], ["9" * 400], ["1", "x"]]
FILTER_VALUES = [NUL, "abc", "-5", "9" * 400, "１２３", "2026-99-99"]
SEARCH_VALUES = [NUL, "\x00", CONTROL, "x" * 10_000, "9" * 400, "-5", "%_\\"]
OPERATOR_KEYS = ["", "\x00", "-5", "0", "9" * 400, "１２３", "abc", "1:" * 300, CONTROL]
# Ids an operator key must refuse whatever the cache (the id rule).
NEVER_AN_ID = ["9" * 400, "１２３"]

# Admin views outside the ModelAdmin CRUD URLs, with the query parameters they read.
CUSTOM_VIEWS: dict[str, list[str]] = {
    "admin:metrics_metricsample_charts": ["range", "cache", "worker"],
    "admin:caches_clear_cache": [],  # POST: fuzzed by the operator-form test
    "admin:caches_invalidate_key": [],
    "admin:caches_clear_all": [],
    "admin:caches_refresh_catalogs": [],
    "admin:caches_emergency_clear": [],
}
# Dashboard pages whose URL holds a name (a worker id, a cache name).
PATH_VIEWS = ["admin:caches_worker", "admin:caches_cache"]
# Query parameters every changelist reads (ordering, page, popup target) or rejects.
GENERIC_PARAMS = ["o", "p", "_to_field", "unknown__lookup"]
STANDARD_SUFFIXES = ("_changelist", "_add", "_change", "_delete", "_history")


def _clip(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Probe:
    """A superuser's client that records every 5xx instead of raising."""

    client: Client
    failures: list[str] = field(default_factory=list)
    requests: int = 0

    def get(self, url: str, params: dict[str, Any]) -> HttpResponse:
        return self._check("GET", url, params, self.client.get(url, params))

    def post(self, url: str, data: dict[str, Any], what: str) -> HttpResponse:
        return self._check("POST", url, what, self.client.post(url, data))

    def _check(self, method: str, url: str, what: Any, response: Any) -> Any:
        self.requests += 1
        if response.status_code >= 500:
            exc = getattr(response, "exc_info", None)
            reason = f"{exc[0].__name__}: {str(exc[1])[:120]}" if exc else ""
            self.failures.append(
                f"{method} {url} {_clip(what)} -> {response.status_code} {reason}"
            )
        return response

    def assert_clean(self) -> None:
        assert self.requests > 0
        assert self.failures == [], "\n".join(self.failures[:40])
        # Still a logged-in superuser: a redirect to the login page hides nothing.
        assert self.client.get(reverse("admin:index")).status_code == 200


@pytest.fixture
def superuser() -> Any:
    return get_user_model().objects.create_superuser(
        "fuzzer", "fuzzer@x.test", "correct horse battery staple"
    )


@pytest.fixture
def probe(superuser: Any) -> Probe:
    client = Client(raise_request_exception=False)
    client.force_login(superuser)
    return Probe(client)


@pytest.fixture(autouse=True)
def _no_bus(monkeypatch: pytest.MonkeyPatch) -> list[AnyCommand]:
    """Record operator commands instead of waiting for workers to answer them."""
    sent: list[AnyCommand] = []

    def send(command: AnyCommand, *, timeout: float) -> list[WorkerReply]:
        sent.append(command)
        return []

    monkeypatch.setattr("caches.bus.send_command", send)
    return sent


# --------------------------------------------------------------- the registry


def registered() -> list[tuple[type[models.Model], admin.ModelAdmin]]:
    """Return every registered (model, ModelAdmin), in a stable order."""
    return sorted(admin.site._registry.items(), key=lambda kv: kv[0]._meta.label)


MODELS = [model for model, _ in registered()]
TABLE_MODELS = [model for model in MODELS if model._meta.managed]


def _label(model: type[models.Model]) -> str:
    return model._meta.label


def _url(model: type[models.Model], view: str, *args: Any) -> str:
    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args)


def _request(user: Any, path: str = "/") -> Any:
    request = RequestFactory().get(path)
    request.user = user
    return request


# --------------------------------------------------------------- valid rows


_counter = itertools.count(1)


def _field_value(f: models.Field, n: int) -> Any:
    """Return a valid value of field `f` for the n-th seeded row."""
    if f.choices:
        return f.choices[0][0]
    if isinstance(f, models.BigIntegerField):
        return 10**17 + n
    if isinstance(f, models.IntegerField):
        return 1
    if isinstance(f, models.FloatField | models.DecimalField):
        return 1
    if isinstance(f, models.BooleanField):
        return False
    if isinstance(f, models.EmailField):
        return f"u{n}@x.test"
    if isinstance(f, models.URLField):
        return f"https://x.test/{n}.png"
    if isinstance(f, models.JSONField):
        return {"k": n}
    if isinstance(f, models.DateTimeField):
        return timezone.now()
    if isinstance(f, models.DateField):
        return timezone.now().date()
    if isinstance(f, models.CharField | models.TextField):
        return f"{f.model._meta.model_name}{n}"[: f.max_length or 50]
    raise AssertionError(f"no seed value for {f.model.__name__}.{f.name} ({f})")


def _default_fits(f: models.Field) -> bool:
    return f.has_default() and (f.blank or f.get_default() not in f.empty_values)


def seed_row(model: type[models.Model]) -> models.Model:
    """Create a valid row of `model` (and of the rows it needs) with generic values."""
    n = next(_counter)
    values: dict[str, Any] = {}
    for f in model._meta.concrete_fields:
        if isinstance(f, models.AutoField) or f.null or _default_fits(f):
            continue
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            continue
        if f.is_relation:
            values[f.name] = seed_row(f.related_model)
        else:
            values[f.name] = _field_value(f, n)
    row = model(**values)
    row.full_clean()  # the seeder itself obeys the rules
    row.save()
    return row


# --------------------------------------------------------------- form data


def _inner(widget: forms.Widget) -> forms.Widget:
    return widget.widget if isinstance(widget, RelatedFieldWidgetWrapper) else widget


def _keys(form: forms.BaseForm, name: str) -> list[str]:
    """Return the POST keys of form field `name` (a split widget has several)."""
    key = form.add_prefix(name)
    widget = _inner(form.fields[name].widget)
    if isinstance(widget, forms.MultiWidget):
        return [f"{key}_{i}" for i in range(len(widget.widgets))]
    return [key]


def _encode(form: forms.BaseForm, name: str) -> dict[str, Any]:
    bound, field_ = form[name], form.fields[name]
    value = bound.value()
    keys = _keys(form, name)
    widget = _inner(field_.widget)
    if isinstance(widget, forms.MultiWidget):
        parts = value if isinstance(value, list) else widget.decompress(value)
        return {
            k: "" if p is None else str(p) for k, p in zip(keys, parts, strict=False)
        }
    if isinstance(field_, forms.BooleanField):
        return {keys[0]: "on"} if value else {}
    if isinstance(value, list | tuple):
        return {keys[0]: [str(v) for v in value]}
    return {keys[0]: "" if value is None else str(value)}


def form_data(form: forms.BaseForm) -> dict[str, Any]:
    """Return the POST data that submits `form`'s current values unchanged."""
    data: dict[str, Any] = {}
    for name in form.fields:
        data.update(_encode(form, name))
    return data


def inline_management_data(
    model_admin: admin.ModelAdmin, request: Any, obj: Any
) -> dict:
    """Return management-form data submitting no inline rows (as the admin prefixes them)."""
    data: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for formset_class, _ in model_admin.get_formsets_with_inlines(request, obj):
        prefix = formset_class.get_default_prefix()
        seen[prefix] = seen.get(prefix, 0) + 1
        if seen[prefix] != 1 or not prefix:
            prefix = f"{prefix}-{seen[prefix]}"
        data |= {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"}
    return data


def hostile_values(form_field: forms.Field) -> list[Any]:
    """Return the hostile values worth sending to a field of this type."""
    if isinstance(form_field, forms.JSONField):
        return [*JSONS, NUL]
    if isinstance(form_field, forms.ModelMultipleChoiceField):
        return [*CHOICE_LISTS, NUL]
    if isinstance(form_field, forms.ModelChoiceField | forms.IntegerField):
        return [*IDS, "9" * 5000]
    if isinstance(form_field, forms.FloatField | forms.DecimalField):
        return [*FLOATS, NUL]
    if isinstance(form_field, forms.URLField):
        return [*URLS, NUL]
    if isinstance(form_field, forms.DateField | forms.DateTimeField | forms.TimeField):
        return DATES
    if isinstance(form_field, forms.BooleanField | forms.ChoiceField):
        return [NUL, "abc"]
    return TEXT


def mutations(
    form: forms.BaseForm, *, sample: int | None
) -> Iterator[tuple[str, dict]]:
    """Yield (description, data change) for each field and hostile value."""
    for name, form_field in form.fields.items():
        values = hostile_values(form_field)[:sample]
        for key, value in itertools.product(_keys(form, name), values):
            yield f"{key}={_clip(value)}", {key: value}


def fuzz_form(
    probe: Probe, url: str, form: forms.BaseForm, extra: dict, *, sample: int | None
) -> dict[str, Any]:
    """Post the form once per hostile value, each in an otherwise valid submission."""
    base = form_data(form) | extra
    for what, change in mutations(form, sample=sample):
        probe.post(url, base | change, what)
    return base


# --------------------------------------------------------------- tests


def test_every_custom_admin_view_is_fuzzed() -> None:
    names = {
        f"admin:{pattern.name}"
        for model_admin in admin.site._registry.values()
        for pattern in model_admin.get_urls()
        if getattr(pattern, "name", None)
        and not pattern.name.endswith(STANDARD_SUFFIXES)
        and not pattern.name.endswith("_autocomplete")
    }
    assert names - set(CUSTOM_VIEWS) - set(PATH_VIEWS) == set(), (
        "add it to CUSTOM_VIEWS"
    )


@pytest.mark.parametrize("model", MODELS, ids=_label)
def test_list_filters_search_and_drilldown_never_500(
    probe: Probe, superuser: Any, model
) -> None:  # type: ignore[no-untyped-def]
    model_admin = admin.site._registry[model]
    url = _url(model, "changelist")
    if model._meta.managed:
        seed_row(model)
    request = _request(superuser, url)
    for param, value in itertools.product(GENERIC_PARAMS, ["abc", "9" * 400]):
        probe.get(url, {param: value})
    params: list[str] = []
    if model._meta.managed:
        changelist = model_admin.get_changelist_instance(request)
        params += [
            p for spec in changelist.filter_specs for p in spec.expected_parameters()
        ]
        if changelist.date_hierarchy:
            field_name = changelist.date_hierarchy
            params += [f"{field_name}__{part}" for part in ("year", "month", "day")]
    for param, value in itertools.product(params, FILTER_VALUES):
        probe.get(url, {param: value})
    if model_admin.get_search_fields(request):
        for value in SEARCH_VALUES:
            probe.get(url, {"q": value})
    probe.assert_clean()


AUTOCOMPLETE = [
    (model, name)
    for model, model_admin in registered()
    for name in model_admin.autocomplete_fields
]


@pytest.mark.parametrize(
    ("model", "field_name"), AUTOCOMPLETE, ids=lambda v: getattr(v, "__name__", v)
)
def test_autocomplete_never_500(probe: Probe, model, field_name) -> None:  # type: ignore[no-untyped-def]
    url = reverse("admin:autocomplete")
    target = {"app_label": model._meta.app_label, "model_name": model._meta.model_name}
    for term in [*SEARCH_VALUES, *IDS]:
        probe.get(url, {**target, "field_name": field_name, "term": term})
    for page in ["abc", "-1", "9" * 400, NUL]:
        probe.get(url, {**target, "field_name": field_name, "term": "a", "page": page})
    for bad in [NUL, "abc", "x" * 1000]:
        probe.get(url, {**target, "field_name": bad, "term": "a"})
        probe.get(url, {**target, "model_name": bad, "field_name": field_name})
    probe.assert_clean()


def assert_nothing_hostile_is_stored() -> None:
    """Every stored row of every registered model still passes the model rules."""
    broken = []
    for model in TABLE_MODELS:
        for row in model._default_manager.all():
            try:
                row.full_clean(validate_unique=False)
            except ValidationError as exc:
                broken.append(f"{model._meta.label} {row.pk}: {_clip(exc.messages)}")
    assert broken == []


@pytest.mark.parametrize("model", TABLE_MODELS, ids=_label)
def test_add_and_change_forms_never_500(probe: Probe, superuser: Any, model) -> None:  # type: ignore[no-untyped-def]
    model_admin = admin.site._registry[model]
    row = seed_row(model)
    request = _request(superuser)
    # Forbidden views still get a POST: they must answer 403, not fail.
    probe.post(_url(model, "change", row.pk), {"x": NUL}, "a read-only change view")
    probe.post(_url(model, "add"), {"x": NUL}, "a read-only add view")
    if model_admin.has_change_permission(request, row):
        form = model_admin.get_form(request, row)(instance=row)
        extra = inline_management_data(model_admin, request, row)
        url = _url(model, "change", row.pk)
        base = fuzz_form(probe, url, form, extra, sample=None)
        # The baseline is valid, so each hostile value alone reached the save path.
        assert probe.post(url, base, "the unchanged form").status_code == 302
    if model_admin.has_add_permission(request):
        template = seed_row(model)  # a valid row's values as the add form's baseline
        form = model_admin.get_form(request, None)(instance=template)
        extra = inline_management_data(model_admin, request, None)
        fuzz_form(probe, _url(model, "add"), form, extra, sample=1)
    probe.assert_clean()
    assert_nothing_hostile_is_stored()


@pytest.mark.parametrize("model", TABLE_MODELS, ids=_label)
def test_actions_never_500(probe: Probe, superuser: Any, model) -> None:  # type: ignore[no-untyped-def]
    model_admin = admin.site._registry[model]
    seed_row(model)
    actions = model_admin.get_actions(_request(superuser))
    url = _url(model, "changelist")
    for action, selected in itertools.product(
        [*actions, "abc"], [["abc"], ["\x00"], ["9" * 400]]
    ):
        data = {"action": action, "index": "0", "_selected_action": selected}
        probe.post(url, data, f"{action}:{selected}")
    probe.assert_clean()


def test_custom_views_never_500(probe: Probe) -> None:
    for name, params in CUSTOM_VIEWS.items():
        url = reverse(name)
        for param, value in itertools.product(params, FILTER_VALUES):
            probe.get(url, {param: value})
    probe.assert_clean()


def _cache_names() -> list[str]:
    from caches.operations import ensure_layers_loaded

    ensure_layers_loaded()
    return sorted(entry.name for entry in registry.entries())


def test_operator_forms_never_500_and_refuse_bad_ids(probe: Probe, _no_bus) -> None:  # type: ignore[no-untyped-def]
    invalidate = reverse("admin:caches_invalidate_key")
    others = itertools.cycle(k for k in OPERATOR_KEYS if k not in NEVER_AN_ID)
    for cache in _cache_names():
        for key in [*NEVER_AN_ID, next(others), next(others)]:
            response = probe.post(invalidate, {"cache": cache, "key": key}, key)
            if key in NEVER_AN_ID:
                assert response.status_code == 400, (cache, key)
    assert not [c for c in _no_bus if getattr(c, "key", None) in NEVER_AN_ID]
    for value in [*TEXT, "no_such_cache"]:
        probe.post(reverse("admin:caches_clear_cache"), {"cache": value}, value)
        probe.post(invalidate, {"cache": value, "key": "1"}, value)
    for name, box in [
        ("admin:caches_refresh_catalogs", "fresh"),
        ("admin:caches_emergency_clear", "include_short_term_memory"),
    ]:
        for value in [NUL, "abc", HUGE]:
            probe.post(reverse(name), {box: value}, value)
    probe.assert_clean()


def test_dashboard_pages_and_worker_targets_never_500(probe: Probe, _no_bus) -> None:  # type: ignore[no-untyped-def]
    names = [*TEXT, "a/b", "../..", "%00", "host:1:shard3", "9" * 400, "１２３"]
    dashboard = reverse("admin:caches_cachecontrol_changelist")
    for page, value in itertools.product(["worker", "cache"], names):
        url = f"{dashboard}{page}/{quote(value, safe='/:')}/"
        assert probe.get(url, {}).status_code in (400, 404), (page, _clip(value))
    emergency = reverse("admin:caches_emergency_clear")
    for value in [*TEXT, "gone", "w" * 201]:
        assert probe.get(emergency, {"worker": value}).status_code == 400
        for name, data in [
            ("admin:caches_clear_cache", {"cache": "user"}),
            ("admin:caches_clear_all", {}),
            ("admin:caches_refresh_catalogs", {}),
            ("admin:caches_invalidate_key", {"cache": "user", "key": "1"}),
            ("admin:caches_emergency_clear", {}),
        ]:
            response = probe.post(reverse(name), {**data, "worker": value}, value)
            assert response.status_code == 400, (name, _clip(value))
    assert _no_bus == []  # nothing was sent to a worker that is not live
    probe.assert_clean()


def test_the_probe_sees_a_500(probe: Probe, settings, postgres) -> None:  # type: ignore[no-untyped-def]
    """Without the NUL guard PostgreSQL fails a list filter: the probe must report it."""
    settings.MIDDLEWARE = [
        m for m in settings.MIDDLEWARE if not m.endswith("HostileInputMiddleware")
    ]
    probe.get(reverse("admin:tomori_llm_changelist"), {"provider": "\x00"})
    assert len(probe.failures) == 1 and "DataError" in probe.failures[0]
