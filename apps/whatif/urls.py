from django.urls import path

from apps.whatif import views

app_name = "whatif"
urlpatterns = [
    path("", views.whatif_index, name="index"),
    path("<int:pk>/", views.whatif_detail, name="detail"),
    path("<int:pk>/again/", views.whatif_again, name="again"),
    path("<int:pk>/current.html", views.whatif_report, {"side": "current"}, name="report-current"),
    path("<int:pk>/changed.html", views.whatif_report, {"side": "changed"}, name="report-changed"),
]
