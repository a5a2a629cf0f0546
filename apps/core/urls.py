from django.urls import path

app_name = "core"
urlpatterns: list = []
