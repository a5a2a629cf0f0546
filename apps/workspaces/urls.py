from django.urls import path

from apps.core.auth import throttled_login
from apps.workspaces import views

app_name = "workspaces"
urlpatterns = [
    path("switch/", views.workspace_switch, name="switch"),
    path("preferences/", views.preferences, name="preferences"),
    path("language/", views.language_set, name="language"),
    # a locked current-password check answers 429, as a locked sign-in does
    path("password/", throttled_login(views.PasswordChangeView.as_view()), name="password"),
    path("access-keys/", views.access_key_list, name="access-keys"),
    path("access-keys/new/", views.access_key_create, name="access-key-create"),
    path("access-keys/<str:key_id>/disable/", views.access_key_disable, name="access-key-disable"),
    path("access-keys/<str:key_id>/enable/", views.access_key_enable, name="access-key-enable"),
    path("access-keys/<str:key_id>/delete/", views.access_key_delete, name="access-key-delete"),
]
