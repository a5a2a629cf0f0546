from django.urls import path

from apps.market import views

app_name = "market"
urlpatterns = [
    path("", views.market_index, name="index"),
    path("price-panel/", views.price_panel, name="price-panel"),
    path("<str:name>/", views.market_detail, name="detail"),
]
