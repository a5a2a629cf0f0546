"""The create form's code mount path (CreateJob's CodeSource.MountPath): shown with DLC's
default as its placeholder, checked by the spec's one rule, its errors beside the input and
named by its label in the reader's language."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.jobs.models import Job
from tests.web.test_jobs_views import error_summary, field_error, spot_form


def test_it_offers_the_code_mount_path_with_dlcs_default_as_placeholder(alice_client):
    page = alice_client.get(reverse("jobs:create")).content.decode()
    assert 'name="code_source_mount_path"' in page
    assert 'placeholder="/root/code/"' in page
    assert "Code mount path" in page


def test_it_keeps_the_code_mount_path_and_shows_it_on_the_job_page(alice_client):
    data = spot_form(
        code_source_uri="https://git.local/bert.git",
        code_source_branch="main",
        code_source_mount_path="/workspace/code",
    )
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get()
    assert job.code_source == {
        "uri": "https://git.local/bert.git",
        "branch": "main",
        "mount_path": "/workspace/code",
    }
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert '<dd id="code-mount-path"><span class="mono">/workspace/code</span></dd>' in page


def test_an_empty_code_mount_path_is_not_kept(alice_client):
    data = spot_form(code_source_uri="https://git.local/bert.git", code_source_mount_path="")
    assert alice_client.post(reverse("jobs:create"), data).status_code == 302
    assert "mount_path" not in Job.objects.get().code_source


@pytest.mark.parametrize(
    ("mount", "says"),
    [
        ("code", "must be an absolute path without a .. part"),
        ("/root/../code", "must be an absolute path without a .. part"),
        ("/", "must not be /, a system directory"),
        ("/usr/local/code", "must not be /, a system directory"),
        ("/mnt/data/code", "or /mnt/data (the data sources')"),
        ("/mnt", "or /mnt/data (the data sources')"),
    ],
)
def test_it_refuses_a_bad_code_mount_path_beside_its_input(alice_client, mount, says):
    data = spot_form(code_source_uri="https://git.local/x.git", code_source_mount_path=mount)
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200  # the form again, not a server error
    assert says in field_error(response, "id_code_source_mount_path")
    assert not any("code_source" in line for line in error_summary(response))
    assert [line for line in error_summary(response) if line.startswith("Code mount path")]
    assert not Job.objects.exists()


def test_it_names_the_code_mount_path_by_its_label_in_chinese(alice_client):
    data = spot_form(code_source_uri="https://git.local/x.git", code_source_mount_path="/etc/x")
    response = alice_client.post(
        reverse("jobs:create"), data, headers={"Accept-Language": "zh-hans"}
    )
    assert response.status_code == 200
    [line] = error_summary(response)
    assert line.startswith("代码挂载路径")
    assert "mount_path" not in line and "code_source" not in line
    assert "不能是 /、系统目录" in field_error(response, "id_code_source_mount_path")
