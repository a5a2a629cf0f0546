from django.urls import path

from apps.scheduler import views

app_name = "scheduler"
urlpatterns = [
    path("quotas/", views.quota_tree, name="quotas"),
]
