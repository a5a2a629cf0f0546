from django.urls import path

from apps.ops import views

app_name = "ops"
urlpatterns = [
    path("health/", views.health, name="health"),
    path("healthz", views.healthz, name="healthz"),
]
