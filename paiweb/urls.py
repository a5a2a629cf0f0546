from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from apps.core.auth import AdminLoginForm, LoginForm, throttled_login

# Both sign-in forms are throttled (apps/core/auth.py): they say so, with HTTP 429.
admin.site.login_form = AdminLoginForm


class FaviconView(RedirectView):
    """/favicon.ico, which browsers ask for on pages without an icon link (the admin's):
    the console's icon, rather than a 404 in the console of every admin page."""

    permanent = False  # the icon's static name carries a hash that changes with it

    def get_redirect_url(self, *args, **kwargs) -> str:
        return static("img/favicon.svg")


# A request Django refuses before any view (a Host header not in ALLOWED_HOSTS): the API's
# paths answer in the API's error shape.
handler400 = "apps.api.views.bad_request"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="jobs:list", permanent=False)),
    path(
        "login/",
        # a signed-in user (Back after signing in) goes on to the console, or to ?next=
        throttled_login(
            auth_views.LoginView.as_view(
                authentication_form=LoginForm, redirect_authenticated_user=True
            )
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("favicon.ico", FaviconView.as_view()),
    path("admin/login/", throttled_login(admin.site.login)),  # before admin/: it wraps admin's
    # one password change, whose current password is checked under the sign-in throttle: the
    # admin's own form checked it without limit
    path(
        "admin/password_change/",
        RedirectView.as_view(pattern_name="workspaces:password", permanent=False),
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.api.urls")),
    path("jobs/", include("apps.console.urls")),
    path("pods/", include("apps.agent.urls")),
    path("workspaces/", include("apps.workspaces.urls")),
    path("cluster/", include("apps.scheduler.urls")),
    path("market/", include("apps.market.urls")),
    path("bills/", include("apps.billing.urls")),
    path("whatif/", include("apps.whatif.urls")),
    path("", include("apps.ops.urls")),
]
