"""ROA paths of PAI-DLC 2020-12-03 and AIWorkspace 2021-02-04, mounted at /api/v1/.

Both SDKs put every call under /api/v1/, so one include serves them; the paths have no
trailing slash, as the SDKs send them. Anything else under /api/v1/ is a JSON 404.
"""

from django.urls import path, re_path

from apps.api import views

app_name = "api"
urlpatterns = [
    # PAI-DLC
    path("jobs", views.jobs_view, name="jobs"),  # ListJobs, CreateJob
    path("jobs/<str:job_id>", views.job_view, name="job"),  # GetJob, UpdateJob, DeleteJob
    path("jobs/<str:job_id>/stop", views.job_stop_view, name="job-stop"),
    path("jobs/<str:job_id>/events", views.job_events_view, name="job-events"),
    path("jobs/<str:job_id>/cost", views.job_cost_view, name="job-cost"),  # paiweb's own
    path("jobs/<str:job_id>/metrics", views.job_metrics_view, name="job-metrics"),
    path("jobs/<str:job_id>/pods/<str:pod_id>/events", views.pod_events_view, name="pod-events"),
    path("jobs/<str:job_id>/pods/<str:pod_id>/logs", views.pod_logs_view, name="pod-logs"),
    path("jobtemplates", views.job_templates_view, name="job-templates"),
    path("jobtemplates/<str:template_id>", views.job_template_view, name="job-template"),
    path(
        "jobtemplates/<str:template_id>/defaultversion",
        views.job_template_default_view,
        name="job-template-default",
    ),
    path("ecsspecs", views.ecs_specs_view, name="ecs-specs"),
    # AIWorkspace
    path("workspaces", views.workspaces_view, name="workspaces"),
    path("workspaces/<str:workspace_id>", views.workspace_view, name="workspace"),
    path("quotas", views.quotas_view, name="quotas"),
    # paiweb
    path("spot/prices", views.spot_prices_view, name="spot-prices"),
    re_path(r"^(?P<path>.*)$", views.unknown_action, name="unknown"),
]
