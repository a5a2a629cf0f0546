"""The create form's choices: each role row offers the job type's own roles (and the server
refuses another beside the row's role), and the image fields suggest the cluster file's
images while taking any other."""

from __future__ import annotations

import html
import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.cluster.models import Image
from apps.jobs.models import Job
from apps.jobs.specs import JOB_ROLE_TYPES, JobSpec, RoleSpec
from tests.web.test_clone import clone_form, submit
from tests.web.test_jobs_views import field_error, quota_form, spot_form


def options(content: str, name: str) -> list[tuple[str, str, bool]]:
    """The (value, label, selected) of each option of the select called `name`."""
    select = re.search(rf'<select name="{re.escape(name)}"[^>]*>(.*?)</select>', content, re.S)
    assert select, f"no select {name}"
    return [
        (value, html.unescape(label), bool(selected))
        for value, selected, label in re.findall(
            r'<option value="([^"]*)"( selected)?[^>]*>(.*?)</option>', select[1]
        )
    ]


def offered(content: str, row: int) -> list[str]:
    return [value for value, _, _ in options(content, f"roles-{row}-role_type")]


def chosen(content: str, row: int) -> str:
    return next(value for value, _, on in options(content, f"roles-{row}-role_type") if on)


# --- roles per job type ---------------------------------------------------------------------


def test_it_offers_a_pytorchjob_its_worker_then_its_master(alice_client):
    content = alice_client.get(reverse("jobs:create")).content.decode()
    assert [offered(content, row) for row in range(4)] == [["Worker", "Master"]] * 4
    assert [chosen(content, row) for row in (0, 1)] == ["Worker", "Master"]
    for row in (2, 3):  # only a TFJob has more than two roles
        assert f'id="roles-{row}" data-show-when="job_type=TFJob"' in content
    assert '<fieldset class="role-row" id="roles-1"\n' in content


def test_it_gives_the_page_every_job_types_roles_for_its_script(alice_client):
    content = alice_client.get(reverse("jobs:create")).content.decode()
    data = re.search(r'<script id="job-role-types" type="application/json">(.*?)</script>', content)
    assert json.loads(data[1]) == {t: list(roles) for t, roles in JOB_ROLE_TYPES.items()}


def test_it_offers_the_roles_of_the_job_type_a_rejected_form_asked_for(alice_client):
    data = spot_form(job_type="TFJob", user_command="", **{"roles-0-role_type": "PS"})
    content = alice_client.post(reverse("jobs:create"), data).content.decode()
    assert 'id="form-errors"' in content
    assert offered(content, 0) == ["Worker", "PS", "Chief", "Evaluator"]
    assert chosen(content, 0) == "PS"


def test_it_offers_a_cloned_tfjob_its_roles(alice_client, personas):
    job = submit(
        personas,
        JobSpec(
            display_name="ps-job",
            job_type="TFJob",
            user_command="python train.py",
            quota="team-a",
            roles=[
                RoleSpec(role_type="Worker", pod_count=2, cpu=4000, memory=16384),
                RoleSpec(role_type="PS", cpu=2000, memory=8192),
            ],
        ),
    )
    response, _ = clone_form(alice_client, job)
    content = response.content.decode()
    assert [chosen(content, row) for row in range(4)] == ["Worker", "PS", "Chief", "Evaluator"]
    assert offered(content, 1) == ["Worker", "PS", "Chief", "Evaluator"]
    assert 'name="roles-1-enabled" id="id_roles-1-enabled" checked' in content
    assert 'name="roles-2-enabled" id="id_roles-2-enabled">' in content  # not used


def test_it_refuses_a_role_the_job_type_does_not_have_beside_the_role(alice_client):
    data = spot_form(job_type="TFJob", **{"roles-0-role_type": "Master"})
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200
    assert field_error(response, "id_roles-0-role_type") == (
        "TFJob has no Master role; its roles are Worker, PS, Chief, Evaluator"
    )
    assert Job.objects.count() == 0
    content = response.content.decode()
    # the select still shows what was asked for, marked, beside the error that explains it
    assert options(content, "roles-0-role_type") == [
        ("Worker", "Worker", False),
        ("PS", "PS", False),
        ("Chief", "Chief", False),
        ("Evaluator", "Evaluator", False),
        ("Master", "Master (not a TFJob role)", True),
    ]
    summary = html.unescape(content)
    assert "Role 1: Role</a>: TFJob has no Master role" in summary


def test_it_refuses_a_role_that_is_no_role_at_all(alice_client):
    response = alice_client.post(
        reverse("jobs:create"), spot_form(**{"roles-0-role_type": "Driver"})
    )
    assert "Driver is not one of the available choices" in field_error(
        response, "id_roles-0-role_type"
    )
    assert Job.objects.count() == 0


def test_it_refuses_the_same_role_twice_on_the_second_row(alice_client):
    data = quota_form(
        **{
            "roles-0-role_type": "Worker",
            "roles-1-enabled": "on",
            "roles-1-role_type": "Worker",
            "roles-1-cpu_cores": "1",
            "roles-1-memory_gib": "1",
        }
    )
    response = alice_client.post(reverse("jobs:create"), data)
    assert field_error(response, "id_roles-1-role_type") == "Worker appears twice"
    assert Job.objects.count() == 0


@pytest.mark.parametrize(("job_type", "roles"), JOB_ROLE_TYPES.items())
def test_it_creates_a_job_with_the_roles_its_type_has(alice_client, job_type, roles):
    data = quota_form(job_type=job_type)
    for row, role_type in enumerate(roles):
        data |= {
            f"roles-{row}-role_type": role_type,
            f"roles-{row}-pod_count": "1",
            f"roles-{row}-cpu_cores": "1",
            f"roles-{row}-memory_gib": "2",
        }
        if row:
            data[f"roles-{row}-enabled"] = "on"
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get()
    assert job.job_type == job_type
    assert [role.role_type for role in job.roles.order_by("id")] == list(roles)


@pytest.mark.parametrize(
    ("job_type", "rows"),
    [("PyTorchJob", ["Worker", "Master"]), ("MPIJob", ["Launcher", "Worker"])],
)
def test_it_gives_rows_without_a_role_the_job_types_own(alice_client, job_type, rows):
    data = quota_form(
        job_type=job_type,
        **{
            "roles-0-role_type": "",
            "roles-1-role_type": "",
            "roles-1-enabled": "on",
            "roles-1-cpu_cores": "1",
            "roles-1-memory_gib": "2",
        },
    )
    assert alice_client.post(reverse("jobs:create"), data).status_code == 302
    assert [role.role_type for role in Job.objects.get().roles.order_by("id")] == rows


# --- images ---------------------------------------------------------------------------------


def images_on_the_form(content: str) -> list[tuple[str, str]]:
    datalist = re.search(r'<datalist id="image-choices">(.*?)</datalist>', content, re.S)
    assert datalist, "no image suggestions"
    return [
        (value, html.unescape(label))
        for value, label in re.findall(r'<option value="([^"]*)">(.*?)</option>', datalist[1])
    ]


def test_it_suggests_the_clusters_images_for_the_job_and_each_role(alice_client):
    Image.objects.create(name="tf", uri="tensorflow-training:2.15-gpu", description="TFJob")
    Image.objects.create(name="pytorch", uri="pytorch-training:2.3-gpu")
    content = alice_client.get(reverse("jobs:create")).content.decode()
    assert images_on_the_form(content) == [
        ("pytorch-training:2.3-gpu", "pytorch"),
        ("tensorflow-training:2.15-gpu", "tf — TFJob"),
    ]
    for name in ("image", *(f"roles-{row}-image" for row in range(4))):
        assert re.search(rf'name="{name}" maxlength="512" list="image-choices"', content), name
    assert "Pick one the cluster offers, or type any other." in content


def test_it_suggests_no_image_when_the_cluster_declares_none(alice_client):
    content = alice_client.get(reverse("jobs:create")).content.decode()
    assert "<datalist" not in content and 'list="image-choices"' not in content


def test_it_takes_an_image_the_cluster_does_not_suggest(alice_client):
    Image.objects.create(name="pytorch", uri="pytorch-training:2.3-gpu")
    data = spot_form(image="registry.local/mine:1", **{"roles-0-image": "registry.local/w:2"})
    assert alice_client.post(reverse("jobs:create"), data).status_code == 302
    job = Job.objects.get()
    assert (job.image, job.roles.get().image) == ("registry.local/mine:1", "registry.local/w:2")


def test_it_shows_the_images_a_cluster_file_declares(alice_client, tmp_path):
    path = tmp_path / "images.toml"
    path.write_text(
        "[images.pytorch-gpu]\n"
        'uri = "pytorch-training:2.3-gpu-py311"\n'
        'description = "PyTorchJob: PyTorch 2.3"\n'
        "[images.ray]\n"
        'uri = "ray-training:2.9"\n'
    )
    call_command("apply_cluster", str(path), stdout=StringIO())
    content = alice_client.get(reverse("jobs:create")).content.decode()
    assert images_on_the_form(content) == [
        ("pytorch-training:2.3-gpu-py311", "pytorch-gpu — PyTorchJob: PyTorch 2.3"),
        ("ray-training:2.9", "ray"),
    ]
