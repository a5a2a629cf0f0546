from django.urls import path

app_name = "workspaces"
urlpatterns: list = []
