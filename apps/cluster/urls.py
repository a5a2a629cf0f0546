from django.urls import path

from apps.cluster import views

app_name = "cluster"
urlpatterns = [
    path("quotas/", views.quota_tree, name="quotas"),
]
