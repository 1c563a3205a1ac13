"""Django's user and group admins, re-registered with the hostile-input relation fields."""

from django.contrib import admin
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from tomori.admin.hostile import HostileInputAdminMixin


class UserAdmin(HostileInputAdminMixin, auth_admin.UserAdmin):
    """Django's UserAdmin; a 400-digit group or permission id is a form error."""


class GroupAdmin(HostileInputAdminMixin, auth_admin.GroupAdmin):
    """Django's GroupAdmin; a 400-digit permission id is a form error."""


for model, model_admin in ((get_user_model(), UserAdmin), (Group, GroupAdmin)):
    if admin.site.is_registered(model):
        admin.site.unregister(model)
    admin.site.register(model, model_admin)
