from django.urls import path

from apps.scheduler import views

app_name = "scheduler"
urlpatterns = [
    path("quotas/", views.quota_tree, name="quotas"),
    path("quotas/<slug:name>/", views.quota_detail, name="quota"),
]
