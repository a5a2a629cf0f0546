from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The PAI-DLC (2020-12-03) and AIWorkspace (2021-02-04) OpenAPI, signed with AccessKeys."""

    name = "apps.api"
    label = "api"
