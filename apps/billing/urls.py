from django.urls import path

from apps.billing import views

app_name = "billing"
urlpatterns = [
    path("", views.bill_index, name="index"),
    path("export.csv", views.bill_export, name="export"),
]
