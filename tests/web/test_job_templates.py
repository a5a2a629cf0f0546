"""Job templates in the console: save a job's settings under a name, list them, create a job
from one (the create form filled in), delete — with the role rules of jobs."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from apps.jobs.models import Job, JobRole, JobTemplate
from apps.jobs.specs import JobSpec, RoleSpec, job_spec_of, spec_from_json, spec_to_json
from tests.web.test_jobs_views import make_job

pytestmark = pytest.mark.django_db


def login(user) -> Client:
    """A client of its own (the `client` fixture is alice_client's)."""
    client = Client()
    client.force_login(user)
    return client


def save(client, job: Job, name: str, **extra):
    return client.post(
        reverse("jobs:save-template", args=[job.job_id]), {"name": name, **extra}, follow=True
    )


def test_a_spec_survives_its_json_form():
    spec = JobSpec(
        display_name="bert",
        tags={"team": "nlp"},
        envs={"EPOCHS": "3"},
        roles=[
            RoleSpec(role_type="Worker", pod_count=2, cpu=4000, memory=8192, gpu=0, gpu_milli=500),
            RoleSpec(
                role_type="Master", instance_type="ecs.g7.xlarge", spot_price_limit=Decimal("0.011")
            ),
        ],
    )
    data = spec_to_json(spec)
    assert spec_from_json(data) == spec
    assert data["roles"][1]["spot_price_limit"] == "0.011"  # JSON holds no Decimal
    assert spec_from_json({**data, "from_a_later_version": 1}) == spec


def test_a_member_saves_a_job_as_a_template_and_uses_it(alice_client, personas):
    job = make_job(personas, name="resnet")
    job.envs = {"LR": "0.1"}
    job.save()
    page = save(alice_client, job, "resnet-base").content.decode()
    assert "Saved as template “resnet-base” (version 1)." in page
    template = JobTemplate.objects.get(name="resnet-base")
    assert template.workspace == job.workspace and template.user == personas["alice"]
    assert spec_from_json(
        template.versions.get(version=template.default_version).content
    ) == job_spec_of(job, list(job.roles.all()))
    assert 'id="templates"' in page and "resnet-base" in page and "Worker ×1" in page

    form = alice_client.get(reverse("jobs:create"), {"template": template.pk}).content.decode()
    assert 'id="from-template"' in form and "From template resnet-base (version 1)" in form
    assert 'value="resnet"' in form  # named as the job it was saved from
    assert "LR=0.1" in form and "python train.py" in form


def test_a_name_is_taken_until_replaced_and_replacing_is_a_new_version(alice_client, personas):
    first, second = make_job(personas, name="one"), make_job(personas, name="two")
    save(alice_client, first, "base")
    refused = save(alice_client, second, "base").content.decode()
    assert "already has a template named" in refused
    kept = JobTemplate.objects.get(name="base").versions.get().content
    assert spec_from_json(kept).display_name == "one"
    save(alice_client, second, "base", replace="1")
    template = JobTemplate.objects.get(name="base")
    assert template.default_version == 2 and template.versions.count() == 2
    assert spec_from_json(template.versions.get(version=2).content).display_name == "two"
    assert "give the template a name" in save(alice_client, first, "  ").content.decode()
    assert JobTemplate.objects.count() == 1


def test_only_its_saver_or_a_workspace_admin_may_delete_or_replace_a_template(
    alice_client, personas
):
    job = make_job(personas)
    save(alice_client, job, "alices")  # alice owns ws_a
    template = JobTemplate.objects.get()
    bob = login(personas["bob"])  # a member of ws_a
    listing = bob.get(reverse("jobs:templates")).content.decode()
    assert (
        "alices" in listing and reverse("jobs:template-delete", args=[template.pk]) not in listing
    )
    assert bob.post(reverse("jobs:template-delete", args=[template.pk])).status_code == 403
    assert "only the user who saved" in save(bob, job, "alices", replace="1").content.decode()
    assert JobTemplate.objects.get().versions.count() == 1
    # bob's own template is his to delete; alice, an owner, may delete it too
    save(bob, job, "bobs")
    mine = JobTemplate.objects.get(name="bobs")
    assert bob.post(reverse("jobs:template-delete", args=[mine.pk])).status_code == 302
    response = alice_client.post(reverse("jobs:template-delete", args=[template.pk]), follow=True)
    assert "Template “alices” deleted." in response.content.decode()
    assert not JobTemplate.objects.exists()


def test_another_workspaces_template_is_not_found(alice_client, personas):
    save(alice_client, make_job(personas), "private-to-ws-a")
    template = JobTemplate.objects.get()
    charlie = login(personas["charlie"])  # only in ws_b
    assert "private-to-ws-a" not in charlie.get(reverse("jobs:templates")).content.decode()
    assert charlie.get(reverse("jobs:create"), {"template": template.pk}).status_code == 404
    assert charlie.get(reverse("jobs:create"), {"template": "x"}).status_code == 404
    assert charlie.get(reverse("jobs:create"), {"template": "9" * 30}).status_code == 404
    assert charlie.post(reverse("jobs:template-delete", args=[template.pk])).status_code == 404
    job = Job.objects.get()
    assert save(charlie, job, "stolen").status_code == 404


def test_a_shared_gpu_role_keeps_its_share(alice_client, personas):
    job = make_job(personas, name="small")
    JobRole.objects.filter(job=job).update(gpu=0, gpu_milli=250)
    save(alice_client, job, "quarter")
    template = JobTemplate.objects.get()
    assert "(0.25 GPU)" in alice_client.get(reverse("jobs:templates")).content.decode()
    form = alice_client.get(reverse("jobs:create"), {"template": template.pk}).content.decode()
    assert 'value="0.25"' in form


def test_a_templates_resource_source_reads_as_the_job_lists_in_either_language(
    alice_client, personas
):
    """The list said "quota · team-a" and "spot", the stored codes, also in Chinese."""
    save(alice_client, make_job(personas, name="resnet"), "resnet-base")

    english = alice_client.get(reverse("jobs:templates")).content.decode()
    chinese = alice_client.get(
        reverse("jobs:templates"), headers={"accept-language": "zh-Hans"}
    ).content.decode()

    assert "<td>Resource quota · team-a</td>" in english
    assert "<td>资源配额 · team-a</td>" in chinese


def test_a_refused_name_brings_the_form_back_open_with_it(alice_client, personas):
    """Refused ("already has a template named …"), the job page showed Save as template
    closed, the job's own name back in it: open it again, type the name again, tick Replace."""
    first, second = make_job(personas, name="one"), make_job(personas, name="two")
    save(alice_client, first, "base")

    page = save(alice_client, second, "base").content.decode()

    assert "already has a template named" in page
    assert '<details class="save-template" id="save-template" hx-preserve open>' in page
    assert 'value="base"' in page and 'id="template-name"' in page
    plain = alice_client.get(reverse("jobs:detail", args=[second.job_id])).content.decode()
    assert '<details class="save-template" id="save-template" hx-preserve>' in plain
