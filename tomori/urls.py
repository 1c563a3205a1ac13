"""URL configuration: the Django admin is the whole web interface, plus health URLs."""

from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from tomori import health

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("health/", health.liveness, name="health-live"),
    path("health/ready/", health.readiness, name="health-ready"),
]
