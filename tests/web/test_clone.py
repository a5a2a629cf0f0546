"""Clone: the create form filled in from an existing job ("<name>-copy", every role, the
quota and idle mode, the bids, env, data and code sources, VPC, fault tolerance), offered in
the job list and as the next action of a finished job."""

from __future__ import annotations

import dataclasses
import html
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.api.parsing import job_spec_from_create_job
from apps.api.serializers import code_source, data_source
from apps.jobs.models import Job, JobStatus
from apps.jobs.services import job_submit
from apps.jobs.specs import JobSpec, RoleSpec, SpotFallback, job_spec_of
from tests.web.test_jobs_views import make_job

JOB_FIELDS = [
    "job_type",
    "image",
    "user_command",
    "envs",
    "data_sources",
    "code_source",
    "priority",
    "max_running_time_minutes",
    "success_policy",
    "accessibility",
    "resource_type",
    "resource_source",
    "quota_id",
    "idle_mode",
    "vpc_id",
    "vswitch_id",
    "security_group_id",
    "enable_aimaster",
    "max_restarts",
    "execution_mode",
    "hang_seconds",
    "enable_easyckpt",
    "description",
    "termination_grace_seconds",
]
ROLE_FIELDS = [
    "role_type",
    "pod_count",
    "image",
    "instance_type_id",
    "cpu",
    "memory",
    "gpu",
    "restart_policy",
    "spot_strategy",
    "spot_discount_limit",
    "spot_price_limit",
]


def submit(personas, spec: JobSpec, *, user="alice") -> Job:
    return job_submit(workspace=personas["ws_a"], user=personas[user], spec=spec)


@pytest.fixture
def spot_job(personas) -> Job:
    """A spot job with two roles, one bidding a discount and one a price, and everything
    else the form has set away from its defaults."""
    return submit(
        personas,
        JobSpec(
            display_name="bert-large",
            job_type="TFJob",
            image="registry.local/tf:2.15",
            user_command="python train.py --epochs 3",
            envs={"NCCL_DEBUG": "INFO", "SEED": "7"},
            tags={"team": "nlp", "run": "b-7"},
            data_sources=[{"uri": "oss://bucket/imagenet", "mount_path": "/mnt/data/imagenet"}],
            code_source={"uri": "https://git.local/bert.git", "branch": "main"},
            priority=7,
            max_running_time_minutes=90,
            success_policy="ChiefWorker",
            resource_source="spot",
            vpc_id="vpc-1",
            vswitch_id="vsw-1",
            security_group_id="sg-1",
            enable_aimaster=True,
            max_restarts=5,
            execution_mode="Async",
            hang_seconds=900,
            enable_easyckpt=True,
            roles=[
                RoleSpec(
                    role_type="Worker",
                    pod_count=2,
                    instance_type="ecs.g7.xlarge",
                    restart_policy="Never",
                    spot_discount_limit=Decimal("0.4"),
                    elastic_spot_specs=[
                        SpotFallback(
                            instance_type="ecs.gn7i-c8g1.2xlarge",
                            spot_discount_limit=Decimal("0.5"),
                        )
                    ],
                ),
                RoleSpec(
                    role_type="PS",
                    pod_count=1,
                    instance_type="ecs.g7.xlarge",
                    image="registry.local/ps:1",
                    spot_price_limit=Decimal("0.011"),
                ),
            ],
        ),
    )


@pytest.fixture
def quota_job(personas) -> Job:
    """A team-a borrower (Acceptable) on a resource config of its own."""
    return submit(
        personas,
        JobSpec(
            display_name="resnet",
            user_command="python resnet.py",
            quota="team-a",
            idle_mode="acceptable",
            roles=[RoleSpec(pod_count=3, cpu=6500, memory=24576, gpu=2)],
        ),
        user="bob",
    )


def clone_form(client, job: Job):
    response = client.get(reverse("jobs:create"), {"clone": job.job_id})
    assert response.status_code == 200
    return response, response.context["form"]


def as_post(form) -> dict:
    """What the browser submits from the unchanged form: each input's shown value."""
    data = {}
    for part in (form.job, *form.roles):
        for field in part:
            value = field.value()
            if field.widget_type == "checkbox":
                if value:
                    data[field.html_name] = "on"
            elif value is not None:
                data[field.html_name] = str(value)
    return data


def test_it_fills_the_form_with_the_jobs_fields(alice_client, spot_job):
    _, form = clone_form(alice_client, spot_job)
    assert form.job.initial == {
        "display_name": "bert-large-copy",
        "job_type": "TFJob",
        "image": "registry.local/tf:2.15",
        "user_command": "python train.py --epochs 3",
        "envs": "NCCL_DEBUG=INFO\nSEED=7",
        "data_sources": "oss://bucket/imagenet /mnt/data/imagenet",
        "code_source_uri": "https://git.local/bert.git",
        "code_source_branch": "main",
        "code_source_commit": "",
        "code_source_mount_path": "",
        "priority": 7,
        "max_running_time_minutes": 90,
        "success_policy": "ChiefWorker",
        "accessibility": "PUBLIC",
        "tags": "run=b-7\nteam=nlp",
        "resource_type": "ECS",
        "resource_source": "spot",
        "quota": "",
        "idle_mode": "off",
        "vpc_id": "vpc-1",
        "vswitch_id": "vsw-1",
        "security_group_id": "sg-1",
        "enable_aimaster": True,
        "max_restarts": 5,
        "execution_mode": "Async",
        "hang_seconds": 900,
        "enable_easyckpt": True,
        "description": "",
        "termination_grace_seconds": 30,
    }
    worker, ps, *unused = form.roles
    assert worker.initial == {
        "role_type": "Worker",
        "pod_count": 2,
        "instance_type": "ecs.g7.xlarge",
        "image": "",
        "restart_policy": "Never",
        "spot_limit_type": "discount",
        "spot_discount_limit": "0.4",
        "spot_price_limit": None,
        "elastic_spot_specs": "ecs.gn7i-c8g1.2xlarge SpotDiscountLimit=0.5",
    }
    assert ps.initial == {
        "enabled": True,
        "role_type": "PS",
        "pod_count": 1,
        "instance_type": "ecs.g7.xlarge",
        "image": "registry.local/ps:1",
        "restart_policy": "OnFailure",
        "spot_limit_type": "price",
        "spot_discount_limit": None,
        "spot_price_limit": "0.011",
        "elastic_spot_specs": "",
    }
    assert [role.initial for role in unused] == [{}, {}]
    assert form.cloned_from == spot_job


def test_it_shows_the_cloned_values_in_the_inputs(alice_client, spot_job):
    response, _ = clone_form(alice_client, spot_job)
    content = response.content.decode()
    assert 'name="display_name" value="bert-large-copy"' in content
    assert '<input type="radio" name="resource_source" value="spot"' in content
    assert 'value="spot" id="id_resource_source_2" checked' in content
    assert '<option value="0.4" selected>' in content
    assert 'name="roles-1-spot_price_limit" value="0.011"' in content
    assert 'name="roles-1-enabled" id="id_roles-1-enabled" checked' in content
    assert 'name="roles-2-enabled" id="id_roles-2-enabled">' in content  # not used
    assert 'name="enable_aimaster" id="id_enable_aimaster" checked' in content
    assert "NCCL_DEBUG=INFO\nSEED=7</textarea>" in html.unescape(content)
    assert 'id="cloned-from"' in content and spot_job.job_id in content
    assert 'id="form-errors"' not in content  # a fresh form, not a rejected one


def test_it_fills_a_resource_config_quota_and_idle_mode(alice_client, quota_job):
    _, form = clone_form(alice_client, quota_job)
    assert (form.job.initial["resource_source"], form.job.initial["quota"]) == ("quota", "team-a")
    assert form.job.initial["idle_mode"] == "acceptable"
    role = form.roles[0].initial
    assert (role["instance_type"], role["cpu_cores"], role["memory_gib"], role["gpus"]) == (
        "",
        "6.5",
        "24",
        "2",
    )
    assert role["pod_count"] == 3


@pytest.mark.parametrize("source", ["spot_job", "quota_job"])
def test_it_submits_the_unchanged_clone_as_the_same_job(alice_client, request, source):
    original: Job = request.getfixturevalue(source)
    _, form = clone_form(alice_client, original)
    response = alice_client.post(reverse("jobs:create"), as_post(form))
    assert response.status_code == 302, response.content.decode()[:2000]
    copy = Job.objects.exclude(pk=original.pk).get()
    assert copy.display_name == f"{original.display_name}-copy"
    assert copy.user.username == "alice"
    for name in JOB_FIELDS:
        assert getattr(copy, name) == getattr(original, name), name
    tags = "key", "value"
    assert list(copy.tags.values_list(*tags)) == list(original.tags.values_list(*tags))
    pairs = list(zip(copy.roles.order_by("id"), original.roles.order_by("id"), strict=True))
    for new, old in pairs:
        for name in ROLE_FIELDS:
            assert getattr(new, name) == getattr(old, name), name
        fallback = "instance_type_id", "spot_discount_limit", "spot_price_limit", "position"
        assert list(new.elastic_spot_specs.values_list(*fallback)) == list(
            old.elastic_spot_specs.values_list(*fallback)
        )


def test_it_keeps_a_long_name_within_the_limit(alice_client, personas):
    job = make_job(personas, name="n" * 256)
    _, form = clone_form(alice_client, job)
    assert form.job.initial["display_name"] == "n" * 251 + "-copy"


def test_it_lets_a_member_clone_a_job_of_their_workspace(client, personas, spot_job):
    client.force_login(personas["bob"])
    _, form = clone_form(client, spot_job)
    assert form.job.initial["display_name"] == "bert-large-copy"


def test_it_hides_a_job_of_another_workspace_from_clone(client, personas, spot_job):
    client.force_login(personas["charlie"])
    response = client.get(reverse("jobs:create"), {"clone": spot_job.job_id})
    assert response.status_code == 404
    assert spot_job.job_id not in response.content.decode()
    assert client.get(reverse("jobs:create"), {"clone": "dlcnope"}).status_code == 404


def test_it_offers_clone_in_every_row_of_the_list(alice_client, personas):
    job = make_job(personas, name="listed")
    content = alice_client.get(reverse("jobs:list")).content.decode()
    assert f'href="{reverse("jobs:create")}?clone={job.job_id}"' in content


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED])
def test_it_offers_clone_as_the_next_action_of_a_finished_job(alice_client, personas, status):
    job = make_job(personas, status=status)
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    url = f"{reverse('jobs:create')}?clone={job.job_id}"
    clone = f'<a class="btn btn-primary" id="clone-job" href="{url}"'
    assert clone in page
    live = alice_client.get(
        reverse("jobs:detail", args=[job.job_id]),
        headers={"HX-Request": "true", "HX-Target": "job-live"},
    )
    assert live.status_code == 286 and clone in live.content.decode()  # the page's last swap


def test_it_offers_clone_quietly_beside_stop_while_the_job_runs(alice_client, personas):
    job = make_job(personas)
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert 'class="btn btn-quiet" id="clone-job"' in page and 'id="stop-job"' in page


def test_it_says_the_clone_goes_to_the_current_workspace(admin_client, personas):
    theirs = make_job(personas, name="charlies-job", user="charlie", workspace="ws_b")
    admin_client.post(reverse("workspaces:switch"), {"workspace_id": personas["ws_a"].pk})
    response, form = clone_form(admin_client, theirs)
    note = html.unescape(response.content.decode())
    assert "of workspace Team B; the new job is created in Team A" in note
    assert form.job.initial["display_name"] == "charlies-job-copy"


def test_it_says_which_roles_the_form_cannot_hold(alice_client, personas):
    job = make_job(personas, name="many-roles")
    for role_type in ("Master", "PS", "Chief", "Evaluator"):
        job.roles.create(role_type=role_type, pod_count=1, cpu=1000, memory=1024)
    response, form = clone_form(alice_client, job)
    assert [role.initial["role_type"] for role in form.roles] == ["Worker", "Master", "PS", "Chief"]
    assert form.roles_left_out == 1
    assert "1 more role of the job is left out" in response.content.decode()


def api_job(personas, **overrides) -> Job:
    """A job made as CreateJob makes it (apps.api.views.create_job: the body parsed into
    a spec, submitted), with every field the form's clone must carry over."""
    body = {
        "WorkspaceId": str(personas["ws_a"].pk),
        "DisplayName": "api-made",
        "Description": "ResNet-50, second try: lr 0.1",
        "Accessibility": "PRIVATE",
        "JobType": "PyTorchJob",
        "ResourceId": "team-a",
        "JobSpecs": [
            {
                "Type": "Worker",
                "PodCount": 2,
                "Image": "registry.local/pytorch:2.3",
                "ResourceConfig": {"CPU": "4", "Memory": "16Gi", "GPU": "1"},
                "RestartPolicy": "Never",
            },
            {
                "Type": "Master",
                "PodCount": 1,
                "Image": "registry.local/pytorch:2.3",
                "ResourceConfig": {"CPU": "2", "Memory": "8Gi", "GPU": "0"},
            },
        ],
        "UserCommand": "python train.py",
        "Envs": {"SEED": "7"},
        "DataSources": [
            {"DataSourceId": "d-imagenet", "MountPath": "/mnt/data/imagenet"},
            {"Uri": "oss://bucket/coco", "MountPath": "/mnt/data/coco"},
        ],
        "CodeSource": {
            "CodeSourceId": "code-resnet",
            "Branch": "dev",
            "Commit": "3f2a9c1",
            "MountPath": "/workspace/code",
        },
        "Priority": 4,
        "JobMaxRunningTimeMinutes": 600,
        "UserVpc": {"VpcId": "vpc-1", "SwitchId": "vsw-1", "SecurityGroupId": "sg-1"},
        "Settings": {
            "TerminationGracePeriodSeconds": 120,
            "OversoldType": "AcceptQuotaOverSold",
            "EnableErrorMonitoringInAIMaster": True,
            "ErrorMonitoringArgs": "--max-num-of-job-restart=5 --enable-job-hang-detection=True "
            "--job-hang-interval=600",
            "AdvancedSettings": {"EnableEasyCkpt": True},
            "Tags": {"team": "vision"},
        },
    }
    body.update(overrides)
    spec = job_spec_from_create_job(body)
    return job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)


def test_a_clone_of_an_api_job_keeps_its_code_source(alice_client, personas):
    """CodeSourceId (in the form's code source), branch, commit and MountPath: GetJob tells
    the copy's code source as the original's, and the job page shows it."""
    original = api_job(personas)
    response, form = clone_form(alice_client, original)
    initial = {k: v for k, v in form.job.initial.items() if k.startswith("code_source")}
    assert initial == {
        "code_source_uri": "code-resnet",
        "code_source_branch": "dev",
        "code_source_commit": "3f2a9c1",
        "code_source_mount_path": "/workspace/code",
    }
    assert 'name="code_source_mount_path" value="/workspace/code"' in response.content.decode()
    assert alice_client.post(reverse("jobs:create"), as_post(form)).status_code == 302
    copy = Job.objects.exclude(pk=original.pk).get()
    assert (
        code_source(copy.code_source)
        == code_source(original.code_source)
        == {
            "CodeSourceId": "code-resnet",
            "Branch": "dev",
            "Commit": "3f2a9c1",
            "MountPath": "/workspace/code",
        }
    )
    page = alice_client.get(reverse("jobs:detail", args=[copy.job_id])).content.decode()
    assert '<dd id="code-source"><span class="mono">code-resnet</span> @ dev' in page
    assert '<dd id="code-mount-path"><span class="mono">/workspace/code</span></dd>' in page


def test_a_clone_of_an_api_job_keeps_its_data_source_ids(alice_client, personas):
    """A DataSourceId given without a Uri is the form's line datasource://<id>, and comes
    back as the same DataSourceId: GetJob tells the copy's data sources as the original's."""
    original = api_job(personas)
    _, form = clone_form(alice_client, original)
    assert form.job.initial["data_sources"] == (
        "datasource://d-imagenet /mnt/data/imagenet\noss://bucket/coco /mnt/data/coco"
    )
    assert alice_client.post(reverse("jobs:create"), as_post(form)).status_code == 302
    copy = Job.objects.exclude(pk=original.pk).get()
    assert copy.data_sources == original.data_sources
    assert [data_source(s) for s in copy.data_sources] == [
        {
            "DataSourceId": "d-imagenet",
            "Uri": "datasource://d-imagenet",
            "MountPath": "/mnt/data/imagenet",
        },
        {"Uri": "oss://bucket/coco", "MountPath": "/mnt/data/coco"},
    ]


def test_a_clone_of_an_api_job_keeps_its_description_and_grace_period(alice_client, personas):
    original = api_job(personas)
    response, form = clone_form(alice_client, original)
    assert form.job.initial["description"] == "ResNet-50, second try: lr 0.1"
    assert form.job.initial["termination_grace_seconds"] == 120
    assert 'name="termination_grace_seconds" value="120"' in response.content.decode()
    assert alice_client.post(reverse("jobs:create"), as_post(form)).status_code == 302
    copy = Job.objects.exclude(pk=original.pk).get()
    assert copy.description == "ResNet-50, second try: lr 0.1"
    assert copy.termination_grace_seconds == 120


def test_an_unchanged_clone_of_an_api_job_is_the_same_job(alice_client, personas):
    """Every field CreateJob kept is in the clone form, and comes back from it: as the job
    keeps it, and as GetJob tells it."""
    original = api_job(personas)
    _, form = clone_form(alice_client, original)
    response = alice_client.post(reverse("jobs:create"), as_post(form))
    assert response.status_code == 302, response.content.decode()[:2000]
    copy = Job.objects.exclude(pk=original.pk).get()
    roles = list(original.roles.order_by("id")), list(copy.roles.order_by("id"))
    before, after = job_spec_of(original, roles[0]), job_spec_of(copy, roles[1])
    assert after.display_name == "api-made-copy"
    # the form's code source is CodeSourceId's place: GetJob tells the two the same
    assert code_source(after.code_source) == code_source(before.code_source)
    assert [data_source(s) for s in after.data_sources] == [
        data_source(s) for s in before.data_sources
    ]
    same = {"display_name": before.display_name, "code_source": before.code_source}
    assert dataclasses.replace(after, **same) == before
