"""The cache dashboard: the fleet, each worker, each cache across the fleet; the operator buttons.

Pages (GET): the fleet overview (a row per live worker, a row per cache),
a worker's page (its memory, bus, caches and turns: what the dashboard
showed per worker before), and a cache's page (a row per worker). Every
button is a POST (CSRF-protected by `admin_site.admin_view`) that needs
`caches.manage_caches`; it sends one operator command over the bus, to
every worker or, from a worker's page, to that worker alone; it reports the
answers as admin messages, named by worker, and is recorded in the admin log
against the CacheControl content type.
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
from caches.models import CacheControl
from caches.operations import (
    EmergencyPlan,
    OperationOutcome,
    describe_command,
    emergency_plan,
    read_live_workers,
    send_command,
)
from tomori.admin.cache_dashboard.forms import (
    ClearAllForm,
    ClearCacheForm,
    CommandForm,
    EmergencyClearForm,
    InvalidateKeyForm,
    RefreshCatalogsForm,
)
from tomori.admin.cache_dashboard.pages import (
    Page,
    cache_choices,
    cache_page,
    fleet_page,
    worker_page,
)
from tomori.domain.knobs import knobs

MANAGE_PERMISSION = "caches.manage_caches"
REFRESH_SECONDS = 10
CATALOG_TIMEOUT = 20.0
#: Answers from more workers than this are grouped (the admin log keeps each).
ANSWER_LINES = 4


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


def emergency_faults(plan: EmergencyPlan) -> list[str]:
    """Return the confirmation page's banner lines."""
    if plan.live_fault is None:
        return []
    return [
        f"Live worker data unavailable: {plan.live_fault}. The lists below come "
        "from this process's registry, and the bus cannot reach the workers now."
    ]


def report(request: HttpRequest, outcome: OperationOutcome) -> None:
    """Add one summary message and the workers' answers (grouped past a few)."""
    if not outcome.answered:
        messages.warning(request, outcome.summary() + ".")
        return
    level = messages.SUCCESS if outcome.ok else messages.ERROR
    messages.add_message(request, level, outcome.summary() + ".")
    for line in outcome.brief_lines(ANSWER_LINES):
        messages.info(request, line)


class DashboardViews:
    """The dashboard's views, bound to the CacheControl ModelAdmin."""

    def __init__(self, model_admin: ModelAdmin) -> None:
        self.model_admin = model_admin

    def _url(self, worker: str = "") -> str:
        if worker:
            return reverse("admin:caches_worker", args=[worker])
        return reverse("admin:caches_cachecontrol_changelist")

    def _context(self, request: HttpRequest, **extra: Any) -> dict[str, Any]:
        return {
            **self.model_admin.admin_site.each_context(request),
            "opts": CacheControl._meta,
            "can_manage": can_manage(request),
            "refresh_seconds": REFRESH_SECONDS,
            "timeout": command_timeout(),
            **extra,
        }

    def _render(
        self, request: HttpRequest, template: str, page: Page, **extra: Any
    ) -> HttpResponse:
        status = extra.pop("status", None) or page.status
        context = self._context(
            request,
            **page.context,
            # A rejected POST renders at its own URL (a GET there is a 405):
            # the refresh loads the page, and waits while an error is on
            # screen so the operator can read it.
            refresh_paused=status >= 400,
            **extra,
        )
        return TemplateResponse(
            request, f"admin/caches/{template}", context, status=status
        )

    def render_dashboard(
        self,
        request: HttpRequest,
        *,
        key_form: InvalidateKeyForm | None = None,
        status: int = 200,
    ) -> HttpResponse:
        """Render the fleet overview (optionally with a bound, invalid key form).

        With Redis or the database unreachable it still renders, with a
        banner naming each fault.
        """
        page = fleet_page()
        form = key_form or InvalidateKeyForm(
            cache_choices=cache_choices(page.context["cache_names"]),
            issued_by=_issuer(request),
        )
        return self._render(
            request,
            "dashboard.html",
            page,
            title="Cache dashboard",
            key_form=form,
            refresh_url=self._url(),
            status=status,
        )

    def render_worker(
        self, request: HttpRequest, page: Page, *, status: int = 200
    ) -> HttpResponse:
        """Render one worker's page; a worker that is not live is a 404 saying so."""
        worker_id = page.context["worker_id"]
        return self._render(
            request,
            "worker.html",
            page,
            title=f"Worker {worker_id}",
            refresh_url=self._url(worker_id),
            status=status if page.status == 200 else page.status,
        )

    def dashboard(self, request: HttpRequest) -> HttpResponse:
        """Show the fleet (GET only; it never changes anything)."""
        return self.render_dashboard(request)

    def worker(self, request: HttpRequest, worker_id: str) -> HttpResponse:
        """Show one worker: its panels, its caches, its recent turns."""
        return self.render_worker(request, worker_page(worker_id))

    def cache(self, request: HttpRequest, name: str) -> HttpResponse:
        """Show one cache across the fleet: a row per worker that holds it."""
        page = cache_page(name)
        refresh_url = reverse("admin:caches_cache", args=[name])
        return self._render(
            request, "cache.html", page, title=f"Cache {name}", refresh_url=refresh_url
        )

    def _render_back(
        self, request: HttpRequest, form: CommandForm, status: int, **extra: Any
    ) -> HttpResponse:
        """Render the page the form was sent from: its worker's, or the fleet's."""
        page = worker_page(form.target) if form.target else None
        if page is not None and page.status == 200:
            return self.render_worker(request, page, status=status)
        return self.render_dashboard(request, status=status, **extra)

    def _send(
        self,
        request: HttpRequest,
        form: CommandForm,
        *,
        timeout: float | None = None,
    ) -> HttpResponse:
        if not form.is_valid() or form.command is None:
            return self._invalid(request, form)
        try:
            outcome = send_command(form.command, timeout=timeout or command_timeout())
        except BusUnavailable as exc:
            # A form error, not a 500: the operator learns nothing was sent, and why.
            messages.error(request, f"Nothing was sent: {exc}")
            form.add_error(None, str(exc))
            return self._render_back(request, form, 503, **_key_form(form))
        log_operator_action(request, outcome)
        report(request, outcome)
        return HttpResponseRedirect(self._url(outcome.target or ""))

    def _invalid(self, request: HttpRequest, form: CommandForm) -> HttpResponse:
        extra = _key_form(form)
        if not extra:  # the key form shows its own errors
            errors = "; ".join(str(e) for errs in form.errors.values() for e in errs)
            messages.error(request, f"Nothing was sent: {errors}")
        return self._render_back(request, form, 400, **extra)

    def clear_cache(self, request: HttpRequest) -> HttpResponse:
        """Clear one cache on every worker, or on the one the form names."""
        _require_manage(request)
        return self._send(
            request, ClearCacheForm(request.POST, issued_by=_issuer(request))
        )

    def invalidate_key(self, request: HttpRequest) -> HttpResponse:
        """Drop one key of one cache on every worker; a bad key is a form error."""
        _require_manage(request)
        workers = read_live_workers(with_populations=False).workers
        names = {layer.name for worker in workers for layer in worker.layers}
        form = InvalidateKeyForm(
            request.POST, cache_choices=cache_choices(names), issued_by=_issuer(request)
        )
        return self._send(request, form)

    def clear_all(self, request: HttpRequest) -> HttpResponse:
        """Clear every clearable cache (the ones with a clear button) on every worker."""
        _require_manage(request)
        return self._send(
            request, ClearAllForm(request.POST, issued_by=_issuer(request))
        )

    def refresh_catalogs(self, request: HttpRequest) -> HttpResponse:
        """Refresh the OpenRouter catalogs on every worker."""
        _require_manage(request)
        form = RefreshCatalogsForm(request.POST, issued_by=_issuer(request))
        return self._send(request, form, timeout=catalog_timeout())

    def emergency_clear(self, request: HttpRequest) -> HttpResponse:
        """GET: say what the emergency clear clears and keeps, and where. POST: run it."""
        _require_manage(request)
        if request.method == "POST":
            return self._send(
                request, EmergencyClearForm(request.POST, issued_by=_issuer(request))
            )
        # The worker a worker's page asks about: checked as the POST will be.
        form = EmergencyClearForm(
            {"worker": request.GET.get("worker", "")}, issued_by=_issuer(request)
        )
        if not form.is_valid():
            return self._invalid(request, form)
        plan = emergency_plan()
        context = self._context(
            request,
            title="Run the emergency cache clear?",
            faults=emergency_faults(plan),
            plan=plan,
            plan_with_stm=emergency_plan(include_short_term_memory=True),
            form=EmergencyClearForm(
                initial={"worker": form.cleaned_data["worker"]},
                issued_by=_issuer(request),
            ),
            worker_id=form.cleaned_data["worker"],
        )
        return TemplateResponse(request, "admin/caches/emergency_confirm.html", context)

    def wrapped(self) -> dict[str, Any]:
        """Return each view with its HTTP method restriction applied."""
        pages = ["GET", "HEAD"]
        return {
            "dashboard": require_http_methods(pages)(self.dashboard),
            "worker": require_http_methods(pages)(self.worker),
            "cache": require_http_methods(pages)(self.cache),
            "clear": require_POST(self.clear_cache),
            "invalidate": require_POST(self.invalidate_key),
            "clear_all": require_POST(self.clear_all),
            "catalogs": require_POST(self.refresh_catalogs),
            "emergency": require_http_methods(["GET", "POST"])(self.emergency_clear),
        }


def _key_form(form: CommandForm) -> dict[str, Any]:
    # The key form re-renders with its errors; any other form's are messages.
    return {"key_form": form} if isinstance(form, InvalidateKeyForm) else {}
