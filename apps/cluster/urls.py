from django.urls import path

app_name = "cluster"
urlpatterns: list = []
