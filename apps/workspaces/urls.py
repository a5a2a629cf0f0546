from django.urls import path

from apps.workspaces import views

app_name = "workspaces"
urlpatterns = [
    path("switch/", views.workspace_switch, name="switch"),
    path("access-keys/", views.access_key_list, name="access-keys"),
]
