from django.urls import path

from apps.agent import views

app_name = "pods"
urlpatterns = [
    path("<str:pod_id>/logs/", views.pod_logs, name="logs"),
    path("<str:pod_id>/logs/download/", views.pod_logs_download, name="logs-download"),
]
