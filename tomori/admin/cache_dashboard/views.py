"""The cache dashboard: live layers per worker, and the operator buttons that command them.

Every button is a POST (CSRF-protected by `admin_site.admin_view`) that needs
`caches.manage_caches`; it sends one operator command to every worker over
the bus, reports each worker's answer (or that none came) as admin messages,
and is recorded in the admin log against the CacheControl content type.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from caches.bus import BusUnavailable
from caches.live import snapshot_ttl_seconds
from caches.messages import AnyCommand
from caches.models import CacheControl
from caches.operations import (
    DATABASE_ERRORS,
    EmergencyPlan,
    LiveWorkers,
    OperationOutcome,
    clear_all_command,
    database_fault,
    describe_command,
    emergency_plan,
    ensure_layers_loaded,
    read_live_workers,
    send_command,
)
from caches.registry import registry
from metrics.charts.last_sample import (
    LastSample,
    last_cache_sizes_sample,
    sample_age_note,
)
from tomori.admin.cache_dashboard.forms import (
    ClearCacheForm,
    CommandForm,
    EmergencyClearForm,
    InvalidateKeyForm,
    RefreshCatalogsForm,
)
from tomori.domain.knobs import knobs

MANAGE_PERMISSION = "caches.manage_caches"
REFRESH_SECONDS = 10
CATALOG_TIMEOUT = 20.0


def command_timeout() -> float:
    """Return how long a button waits for the workers' replies."""
    return knobs().CACHE_COMMAND_TIMEOUT_SECONDS


def catalog_timeout() -> float:
    """Return how long the catalog button waits: a refresh goes to the network."""
    return max(command_timeout(), CATALOG_TIMEOUT)


def can_manage(request: HttpRequest) -> bool:
    """Return whether the user may press the dashboard's buttons."""
    return bool(request.user.is_active and request.user.has_perm(MANAGE_PERMISSION))


def _require_manage(request: HttpRequest) -> None:
    if not can_manage(request):
        raise PermissionDenied("needs the caches.manage_caches permission")


def _issuer(request: HttpRequest) -> str:
    return request.user.get_username() or f"user #{request.user.pk}"


def _user_pk(request: HttpRequest) -> int:
    pk = request.user.pk
    assert pk is not None  # admin_view lets only logged-in staff through
    return int(pk)


def cache_choices(worker_caches: set[str]) -> list[tuple[str, str]]:
    """Return (name, "name: key help") for every cache this process or a worker knows."""
    ensure_layers_loaded()
    helps = {entry.name: entry.key_help for entry in registry.entries()}
    names = sorted(set(helps) | worker_caches)
    return [(n, f"{n}: {helps[n]}" if helps.get(n) else n) for n in names]


def log_operator_action(request: HttpRequest, outcome: OperationOutcome) -> None:
    """Record who sent which command, and what came back, in the admin log."""
    LogEntry.objects.create(
        user_id=_user_pk(request),
        content_type=ContentType.objects.get_for_model(
            CacheControl, for_concrete_model=False
        ),
        object_id=None,
        object_repr=f"cache dashboard: {describe_command(outcome.command)}"[:200],
        action_flag=CHANGE,
        change_message="; ".join(outcome.lines()),
    )


def last_sample_or_fault() -> tuple[LastSample | None, str | None]:
    """Return the newest cache_sizes sample, or why it cannot be read."""
    try:
        return last_cache_sizes_sample(), None
    except DATABASE_ERRORS as exc:
        return None, f"{database_fault(exc)} (no stored sample can be shown)"


def live_faults(live: LiveWorkers, sample: LastSample | None) -> list[str]:
    """Return the banner lines: each fault, with the last sample's age if live data is missing."""
    if live.live:
        return list(live.faults)
    first, *rest = live.faults
    return [f"Live worker data unavailable: {first}; {sample_age_note(sample)}.", *rest]


def emergency_faults(plan: EmergencyPlan) -> list[str]:
    """Return the confirmation page's banner lines."""
    if plan.live_fault is None:
        return []
    return [
        f"Live worker data unavailable: {plan.live_fault}. The lists below come "
        "from this process's registry, and the bus cannot reach the workers now."
    ]


def stored_data_notes() -> list[str]:
    """Return warnings about stored data this process cannot use (webhook keys)."""
    from caches.layers.webhook import describe_missing_keys, webhooks_under_missing_keys

    try:
        counts = webhooks_under_missing_keys()
    except DATABASE_ERRORS:
        return []  # a lost database shows as the 503 page or a fault line
    return [describe_missing_keys(counts)] if counts else []


def report(request: HttpRequest, outcome: OperationOutcome) -> None:
    """Add one summary message and one message per worker reply."""
    if not outcome.answered:
        messages.warning(request, outcome.summary() + ".")
        return
    level = messages.SUCCESS if outcome.ok else messages.ERROR
    messages.add_message(request, level, outcome.summary() + ".")
    for line in outcome.lines():
        messages.info(request, line)


class DashboardViews:
    """The dashboard's views, bound to the CacheControl ModelAdmin."""

    def __init__(self, model_admin: ModelAdmin) -> None:
        self.model_admin = model_admin

    def _url(self) -> str:
        return reverse("admin:caches_cachecontrol_changelist")

    def _context(self, request: HttpRequest, **extra: Any) -> dict[str, Any]:
        return {
            **self.model_admin.admin_site.each_context(request),
            "opts": CacheControl._meta,
            "can_manage": can_manage(request),
            **extra,
        }

    def render_dashboard(
        self,
        request: HttpRequest,
        *,
        key_form: InvalidateKeyForm | None = None,
        status: int = 200,
    ) -> HttpResponse:
        """Render the dashboard (optionally with a bound, invalid key form).

        With Redis or the database unreachable it still renders, with a
        banner naming each fault.
        """
        live = read_live_workers()
        workers = live.workers
        sample, sample_fault = (None, None) if workers else last_sample_or_fault()
        names = {layer.name for worker in workers for layer in worker.layers}
        choices = cache_choices(names)
        form = key_form or InvalidateKeyForm(
            cache_choices=choices, issued_by=_issuer(request)
        )
        faults = live_faults(live, sample) + ([sample_fault] if sample_fault else [])
        context = self._context(
            request,
            title="Cache dashboard",
            workers=workers,
            live_known=live.live,
            faults=faults,
            notes=stored_data_notes(),
            last_sample=sample,
            key_form=form,
            snapshot_ttl=snapshot_ttl_seconds(),
            refresh_seconds=REFRESH_SECONDS,
            # A rejected POST renders here at its own URL (a GET there is a
            # 405): the refresh loads the dashboard, and waits while an error
            # is on screen so the operator can read it.
            refresh_url=self._url(),
            refresh_paused=status >= 400,
            timeout=command_timeout(),
        )
        return TemplateResponse(
            request, "admin/caches/dashboard.html", context, status=status
        )

    def dashboard(self, request: HttpRequest) -> HttpResponse:
        """Show every live worker's layers (GET only; it never changes anything)."""
        return self.render_dashboard(request)

    def _send(
        self,
        request: HttpRequest,
        command: AnyCommand,
        *,
        timeout: float | None = None,
        key_form: InvalidateKeyForm | None = None,
    ) -> HttpResponse:
        try:
            outcome = send_command(command, timeout=timeout or command_timeout())
        except BusUnavailable as exc:
            return self._bus_unavailable(request, exc, key_form=key_form)
        log_operator_action(request, outcome)
        report(request, outcome)
        return HttpResponseRedirect(self._url())

    def _bus_unavailable(
        self,
        request: HttpRequest,
        exc: BusUnavailable,
        *,
        key_form: InvalidateKeyForm | None,
    ) -> HttpResponse:
        # A form error, not a 500: the operator learns nothing was sent, and why.
        messages.error(request, f"Nothing was sent: {exc}")
        if key_form is not None:
            key_form.add_error(None, str(exc))
        return self.render_dashboard(request, key_form=key_form, status=503)

    def _invalid(self, request: HttpRequest, form: CommandForm) -> HttpResponse:
        errors = "; ".join(str(e) for errs in form.errors.values() for e in errs)
        messages.error(request, f"Nothing was sent: {errors}")
        return self.render_dashboard(request, status=400)

    def clear_cache(self, request: HttpRequest) -> HttpResponse:
        """Clear one cache on every worker."""
        _require_manage(request)
        form = ClearCacheForm(request.POST, issued_by=_issuer(request))
        if not form.is_valid() or form.command is None:
            return self._invalid(request, form)
        return self._send(request, form.command)

    def invalidate_key(self, request: HttpRequest) -> HttpResponse:
        """Drop one key of one cache on every worker; a bad key is a form error."""
        _require_manage(request)
        workers = read_live_workers(with_populations=False).workers
        names = {layer.name for worker in workers for layer in worker.layers}
        form = InvalidateKeyForm(
            request.POST, cache_choices=cache_choices(names), issued_by=_issuer(request)
        )
        if not form.is_valid() or form.command is None:
            return self.render_dashboard(request, key_form=form, status=400)
        return self._send(request, form.command, key_form=form)

    def clear_all(self, request: HttpRequest) -> HttpResponse:
        """Clear every clearable cache (the ones with a clear button) on every worker."""
        _require_manage(request)
        return self._send(request, clear_all_command(issued_by=_issuer(request)))

    def refresh_catalogs(self, request: HttpRequest) -> HttpResponse:
        """Refresh the OpenRouter catalogs on every worker."""
        _require_manage(request)
        form = RefreshCatalogsForm(request.POST, issued_by=_issuer(request))
        if not form.is_valid() or form.command is None:
            return self._invalid(request, form)
        return self._send(request, form.command, timeout=catalog_timeout())

    def emergency_clear(self, request: HttpRequest) -> HttpResponse:
        """GET: say what the emergency clear clears and keeps. POST: run it."""
        _require_manage(request)
        if request.method == "POST":
            form = EmergencyClearForm(request.POST, issued_by=_issuer(request))
            if form.is_valid() and form.command is not None:
                return self._send(request, form.command)
        plan = emergency_plan()
        context = self._context(
            request,
            title="Run the emergency cache clear?",
            faults=emergency_faults(plan),
            plan=plan,
            plan_with_stm=emergency_plan(include_short_term_memory=True),
            form=EmergencyClearForm(issued_by=_issuer(request)),
            timeout=command_timeout(),
        )
        return TemplateResponse(request, "admin/caches/emergency_confirm.html", context)

    def wrapped(self) -> dict[str, Any]:
        """Return each view with its HTTP method restriction applied."""
        return {
            "dashboard": require_http_methods(["GET", "HEAD"])(self.dashboard),
            "clear": require_POST(self.clear_cache),
            "invalidate": require_POST(self.invalidate_key),
            "clear_all": require_POST(self.clear_all),
            "catalogs": require_POST(self.refresh_catalogs),
            "emergency": require_http_methods(["GET", "POST"])(self.emergency_clear),
        }
