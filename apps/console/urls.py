from django.urls import path

from apps.console import views

app_name = "jobs"  # the job pages' URLs keep the jobs namespace: jobs:list, jobs:detail…
urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_create, name="create"),
    path("new/price-info/", views.job_price_info, name="price-info"),
    path("stop/", views.job_bulk_stop, name="bulk-stop"),
    path("templates/", views.template_list_view, name="templates"),
    path("templates/<int:pk>/delete/", views.template_delete_view, name="template-delete"),
    path("<str:job_id>/", views.job_detail, name="detail"),
    path("<str:job_id>/stop/", views.job_stop_view, name="stop"),
    path("<str:job_id>/delete/", views.job_delete_view, name="delete"),
    path("<str:job_id>/priority/", views.job_priority_view, name="priority"),
    path("<str:job_id>/save-template/", views.template_save_view, name="save-template"),
]
