from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.debug import sensitive_variables
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from apps.core.auth import PasswordChangeForm
from apps.core.errors import ApplicationError
from apps.core.timezones import zone_names
from apps.workspaces import services
from apps.workspaces.middleware import LANGUAGE_SESSION_KEY, SESSION_KEY, ZONE_SESSION_KEY
from apps.workspaces.models import AccessKey
from apps.workspaces.selectors import workspace_for_user


@login_required
@require_POST
def workspace_switch(request: HttpRequest) -> HttpResponse:
    """Make one of the user's workspaces the current one, then go back to where they were."""
    raw = request.POST.get("workspace_id", "").strip()
    if not raw.isdigit():
        return HttpResponseBadRequest(gettext("workspace_id must be a workspace's id"))
    workspace = workspace_for_user(user=request.user, workspace_id=raw)
    if workspace is None:
        raise Http404(gettext("No such workspace among yours"))
    request.session[SESSION_KEY] = workspace.pk
    target = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("jobs:list")
    if getattr(request, "htmx", False):
        return HttpResponseClientRedirect(target)
    return redirect(target)


class AccessKeyForm(forms.Form):
    description = forms.CharField(
        label=_("Description"),
        max_length=200,
        required=False,
        help_text=_('What the key is for, e.g. "training notebook".'),
    )


def _access_key_for_user(request: HttpRequest, key_id: str) -> AccessKey:
    """One of the user's own keys; 404 for anybody else's."""
    return get_object_or_404(AccessKey, user=request.user, key_id=key_id)


@sensitive_variables("new_secret", "context")
def _access_keys_page(
    request: HttpRequest,
    *,
    form: AccessKeyForm | None = None,
    new_key: AccessKey | None = None,
    new_secret: str = "",
    error: str = "",
    status: int = 200,
) -> HttpResponse:
    template = "workspaces/access_keys.html"
    if getattr(request, "htmx", False) and not new_secret:
        template += "#key-table"
    context = {
        "keys": AccessKey.objects.filter(user=request.user).order_by("-created_at", "-pk"),
        "form": form or AccessKeyForm(),
        "new_key": new_key,
        "new_secret": new_secret,
        "error": error,
        "api_endpoint": request.get_host(),
        "max_keys": services.MAX_ACCESS_KEYS_PER_USER,
    }
    response = render(request, template, context, status=status)
    if new_secret:
        response["Cache-Control"] = "no-store"  # the secret must not linger in any cache
    return response


@login_required
def preferences(request: HttpRequest) -> HttpResponse:
    """The user's preferences: the time zone pages show times in."""
    if request.method == "POST":
        choice = request.POST.get("time_zone", "").strip()
        try:
            services.user_time_zone_set(user=request.user, time_zone=choice)
        except ApplicationError as error:
            messages.error(request, error.message)
        else:
            request.session[ZONE_SESSION_KEY] = choice
            if choice:
                message = gettext("Times are now shown in %(zone)s time zone.") % {"zone": choice}
            else:
                message = gettext("Times are now shown in your browser's time zone.")
            messages.success(request, message)
            return redirect(reverse("workspaces:preferences"))
    return render(
        request,
        "workspaces/preferences.html",
        {
            "zones": zone_names(),
            "saved": request.session.get(ZONE_SESSION_KEY, ""),
            "saved_language": request.session.get(LANGUAGE_SESSION_KEY) or "",
        },
    )


@require_POST
def language_set(request: HttpRequest) -> HttpResponse:
    """The header's language switcher (and the preferences page's): the console speaks the
    chosen language from the next page on — remembered for a signed-in user, and in the
    language cookie so the sign-in page speaks it too; "" follows the browser again."""
    choice = request.POST.get("language", "").strip()
    if choice and choice not in dict(settings.LANGUAGES):
        known = ", ".join(code for code, _name in settings.LANGUAGES)
        return HttpResponseBadRequest(
            gettext("language must be one of %(known)s, or empty") % {"known": known}
        )
    if request.user.is_authenticated:
        services.user_language_set(user=request.user, language=choice)
        request.session[LANGUAGE_SESSION_KEY] = choice
    target = request.POST.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("jobs:list")
    response = (
        HttpResponseClientRedirect(target) if getattr(request, "htmx", False) else redirect(target)
    )
    if choice:
        response.set_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            choice,
            max_age=365 * 24 * 3600,
            samesite="Lax",
            secure=request.is_secure(),
        )
    else:
        response.delete_cookie(settings.LANGUAGE_COOKIE_NAME)
    return response


@login_required
def access_key_list(request: HttpRequest) -> HttpResponse:
    """The user's AccessKeys for the PAI-DLC SDK, and the form that makes a new one."""
    return _access_keys_page(request)


@sensitive_variables("key", "secret")
@login_required
@require_POST
def access_key_create(request: HttpRequest) -> HttpResponse:
    """Make a key and show its secret once, on this response only (never redirected,
    never stored in the session or a message)."""
    form = AccessKeyForm(request.POST)
    if not form.is_valid():
        return _access_keys_page(request, form=form, status=400)
    try:
        key, secret = services.access_key_create(
            user=request.user, description=form.cleaned_data["description"]
        )
    except ApplicationError as error:
        return _access_keys_page(request, form=form, error=error.message, status=error.status)
    return _access_keys_page(request, new_key=key, new_secret=secret)


def _after_change(request: HttpRequest, error: str = "", status: int = 200) -> HttpResponse:
    """htmx gets the key table back (errors too, with 200 so htmx swaps it in); a plain
    form post is redirected to the list, or shown the page with the error."""
    if getattr(request, "htmx", False):
        return _access_keys_page(request, error=error)
    if error:
        return _access_keys_page(request, error=error, status=status)
    return redirect("workspaces:access-keys")


@login_required
@require_POST
def access_key_disable(request: HttpRequest, key_id: str) -> HttpResponse:
    services.access_key_disable(key=_access_key_for_user(request, key_id))
    return _after_change(request)


@login_required
@require_POST
def access_key_enable(request: HttpRequest, key_id: str) -> HttpResponse:
    services.access_key_enable(key=_access_key_for_user(request, key_id))
    return _after_change(request)


@login_required
@require_POST
def access_key_delete(request: HttpRequest, key_id: str) -> HttpResponse:
    try:
        services.access_key_delete(key=_access_key_for_user(request, key_id))
    except ApplicationError as error:
        return _after_change(request, error=error.message, status=error.status)
    return _after_change(request)


class PasswordChangeView(auth_views.PasswordChangeView):
    """Preferences → Change password: the signed-in user's own (the current one first, then
    the new one twice, checked by AUTH_PASSWORD_VALIDATORS). They stay signed in here; their
    other sessions end."""

    template_name = "workspaces/password_change.html"
    success_url = reverse_lazy("workspaces:preferences")
    form_class = PasswordChangeForm  # the current password is checked under the throttle

    def get_form_kwargs(self):
        return {**super().get_form_kwargs(), "request": self.request}

    def form_valid(self, form):
        response = super().form_valid(form)
        messages.success(self.request, gettext("Your password was changed."))
        return response
