"""The jobs console: create, list, detail (and its live fragment), stop."""

from __future__ import annotations

import html as html_lib
import random
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.cluster.models import InstanceType
from apps.jobs.models import Job, JobRole, JobStatus, Pod, StatusTransition

# --- helpers -------------------------------------------------------------------------------


def spot_form(**overrides) -> dict:
    """A valid create-job POST: one Worker on ecs.g7.xlarge, spot, SpotDiscountLimit 0.4."""
    data = {
        "display_name": "sample-spot-job",
        "job_type": "PyTorchJob",
        "image": "registry.local/pytorch:2.3",
        "user_command": "python train.py",
        "envs": "",
        "data_sources": "",
        "priority": "1",
        "success_policy": "AllWorkers",
        "resource_type": "ECS",
        "resource_source": "spot",
        "idle_mode": "off",
        "max_restarts": "3",
        "execution_mode": "Sync",
        "roles-0-role_type": "Worker",
        "roles-0-pod_count": "1",
        "roles-0-instance_type": "ecs.g7.xlarge",
        "roles-0-restart_policy": "OnFailure",
        "roles-0-spot_limit_type": "discount",
        "roles-0-spot_discount_limit": "0.4",
        "roles-1-role_type": "Master",
        "roles-1-pod_count": "1",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def quota_form(**overrides) -> dict:
    data = spot_form(
        resource_source="quota",
        quota="team-a",
        **{
            "roles-0-instance_type": "",
            "roles-0-cpu_cores": "8",
            "roles-0-memory_gib": "32",
            "roles-0-gpus": "1",
            "roles-0-spot_discount_limit": "",
        },
    )
    data.update(overrides)
    return data


def field_error(response, field_id: str) -> str:
    """The error text shown beside the input with id `field_id` (its `<id>_error` block)."""
    content = response.content.decode()
    assert 'id="form-errors"' in content  # "The job was not created" above the form
    match = re.search(
        rf'<div class="field-errors" id="{re.escape(field_id)}_error">(.*?)</div>', content, re.S
    )
    assert match, f"no error shown beside {field_id}"
    # the error block sits in the same field container as the input
    container = content.rfind('<div class="field', 0, match.start())
    container = max(container, content.rfind('<fieldset class="field', 0, match.start()))
    assert f'id="{field_id}"' in content[container : match.start()], f"error not beside {field_id}"
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", match[1])).strip()


def make_job(
    personas,
    *,
    status=JobStatus.RUNNING,
    name="train",
    workspace="ws_a",
    user="alice",
    source="quota",
    idle_mode="off",
    created=None,
    pods=0,
) -> Job:
    now = created or timezone.now()
    quota = personas["ws_a"].quotas.get(name="team-a") if source == "quota" else None
    job = Job.objects.create(
        workspace=personas[workspace],
        user=personas[user],
        display_name=name,
        user_command="python train.py",
        resource_source=source,
        quota=quota,
        idle_mode=idle_mode,
        status=status,
        submitted_at=now,
        status_changed_at=now,
        started_at=now if status not in (JobStatus.QUEUING, JobStatus.BIDDING) else None,
        finished_at=now + timedelta(minutes=5)
        if status in ("Succeeded", "Failed", "Stopped")
        else None,
    )
    role = JobRole.objects.create(
        job=job, role_type="Worker", pod_count=max(pods, 1), cpu=4000, memory=16384
    )
    for i in range(pods):
        Pod.objects.create(
            job=job,
            role=role,
            index=i,
            pod_id=f"{job.job_id}-worker-{i}",
            status="Running",
            in_quota=True,
            started_at=now,
        )
    StatusTransition.objects.create(job=job, status=status, started_at=now)
    if created is not None:  # auto_now_add ignores the value given at create
        Job.objects.filter(pk=job.pk).update(created_at=created)
    return job


# --- create ------------------------------------------------------------------------------


def test_it_renders_every_section_of_the_create_form(alice_client):
    response = alice_client.get(reverse("jobs:create"))
    assert response.status_code == 200
    content = response.content.decode()
    for section in (
        "Basics",
        "Resource information",
        "Roles",
        "VPC",
        "Fault tolerance and diagnosis",
    ):
        assert f"<h2>{section}</h2>" in content
    for name in (
        "display_name",
        "job_type",
        "image",
        "user_command",
        "envs",
        "data_sources",
        "code_source_uri",
        "code_source_branch",
        "priority",
        "max_running_time_minutes",
        "success_policy",
        "resource_type",
        "resource_source",
        "quota",
        "idle_mode",
        "vpc_id",
        "vswitch_id",
        "security_group_id",
        "enable_aimaster",
        "max_restarts",
        "execution_mode",
        "enable_easyckpt",
    ):
        assert f'name="{name}"' in content, name
    for i in range(4):
        for name in (
            "role_type",
            "pod_count",
            "instance_type",
            "cpu_cores",
            "memory_gib",
            "gpus",
            "restart_policy",
            "spot_limit_type",
            "spot_discount_limit",
            "spot_price_limit",
        ):
            assert f'name="roles-{i}-{name}"' in content, (i, name)
    assert 'name="roles-0-enabled"' not in content  # the first role is always used
    assert 'name="roles-1-enabled"' in content
    assert 'value="0.4">0.4 (40% of the original price)</option>' in content
    assert "ecs.g7.xlarge — 4 vCPU · 16 GiB · ¥0.80/h" in content
    assert '<option value="team-a" selected data-resource-type="ECS">' in content
    assert 'value="Lingjun"' in content  # team-a's workspace has an ECS and a Lingjun quota
    assert 'name="priority" value="1"' in content
    assert 'name="max_restarts" value="3"' in content
    assert "js/job-form.js" in content


def test_it_fixes_the_resource_type_when_the_workspace_has_one(alice_client, personas, cluster):
    personas["ws_a"].quotas.remove(cluster["lingjun_quota"])
    cluster["lingjun_type"].public_capacity = 0
    cluster["lingjun_type"].save()
    content = alice_client.get(reverse("jobs:create")).content.decode()
    assert '<input type="hidden" name="resource_type" value="ECS"' in content
    assert 'value="Lingjun"' not in content


@pytest.mark.django_db(transaction=True)
def test_it_submits_a_spot_job_and_shows_it_bidding(alice_client, personas):
    response = alice_client.post(reverse("jobs:create"), spot_form(), follow=True)
    job = Job.objects.get()
    assert response.redirect_chain == [(reverse("jobs:detail", args=[job.job_id]), 302)]
    assert job.status == JobStatus.BIDDING
    assert job.workspace == personas["ws_a"] and job.user == personas["alice"]
    role = job.roles.get()
    assert (role.role_type, role.instance_type.name) == ("Worker", "ecs.g7.xlarge")
    assert role.spot_discount_limit == Decimal("0.4") and role.spot_price_limit is None
    content = response.content.decode()
    assert 'class="badge badge-bidding">Bidding</span>' in content
    assert "submitted as" in content  # the success message
    assert "SpotDiscountLimit 0.40" in content and "¥0.32/h" in content


@pytest.mark.django_db(transaction=True)
def test_it_submits_a_quota_job_with_a_resource_config_and_two_roles(alice_client, personas):
    data = quota_form(
        **{
            "roles-1-enabled": "on",
            "roles-1-cpu_cores": "0.5",
            "roles-1-memory_gib": "1.5",
            "envs": "A=1\nB = two words",
            "data_sources": "oss://b/d imagenet",
            "code_source_uri": "https://git.local/repo.git",
            "code_source_branch": "main",
            "enable_aimaster": "on",
        }
    )
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.status != JobStatus.CREATING and job.quota.name == "team-a"
    assert job.status_history.filter(status=JobStatus.QUEUING).exists()
    worker, master = job.roles.all()
    assert (worker.cpu, worker.memory, worker.gpu) == (8000, 32768, 1)
    assert (master.role_type, master.pod_count) == ("Master", 1)
    assert (master.cpu, master.memory) == (500, 1536)
    assert job.envs == {"A": "1", "B": " two words"}
    assert job.data_sources == [{"uri": "oss://b/d", "mount_path": "/mnt/data/imagenet"}]
    assert job.code_source == {"uri": "https://git.local/repo.git", "branch": "main"}
    assert job.enable_aimaster and job.max_restarts == 3


def test_it_ignores_a_role_row_that_is_not_used(alice_client):
    data = spot_form(**{"roles-2-pod_count": "many", "roles-2-instance_type": "nope"})
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 302
    assert Job.objects.get().roles.count() == 1


def test_it_asks_the_market_for_each_roles_live_price(alice_client):
    content = alice_client.get(reverse("jobs:create")).content.decode()
    assert content.count(f'hx-get="{reverse("market:price-panel")}"') == 4
    # the row's instance type and its bid: the panel says how that bid would have fared
    assert 'hx-include="#id_roles-0-instance_type, #id_roles-0-spot_discount_limit,' in content


def test_it_creates_nothing_for_a_user_without_a_workspace(client, personas):
    from tests.factories import make_user

    client.force_login(make_user("dave"))
    assert "No workspace" in client.get(reverse("jobs:create")).content.decode()
    response = client.post(reverse("jobs:create"), spot_form())
    assert response.status_code == 200
    assert Job.objects.count() == 0
    assert "No workspace" in client.get(reverse("jobs:list")).content.decode()


def test_it_does_not_create_a_job_in_a_workspace_the_form_did_not_name(alice_client, personas):
    """The form was drawn for team-a; another tab switched to team-b before it was sent. The
    job went to team-b, which the form never showed: now nothing is created, the form says
    why, keeps what was typed and is drawn for team-b, where sending it again creates it."""
    from apps.workspaces.middleware import SESSION_KEY
    from apps.workspaces.models import Membership

    ws_a, ws_b = personas["ws_a"], personas["ws_b"]
    Membership.objects.create(user=personas["alice"], workspace=ws_b, role="member")
    form = alice_client.get(reverse("jobs:create")).content.decode()
    assert f'name="form_workspace" value="{ws_a.pk}"' in form
    session = alice_client.session
    session[SESSION_KEY] = ws_b.pk
    session.save()

    data = spot_form(display_name="typed-for-team-a", form_workspace=str(ws_a.pk))
    response = alice_client.post(reverse("jobs:create"), data)

    assert response.status_code == 200 and Job.objects.count() == 0
    page = html_lib.unescape(response.content.decode())
    assert (
        f"This form was filled in for workspace {ws_a}, but the current workspace is now "
        f"{ws_b} (switched in another tab or window)." in page
    )
    assert 'value="typed-for-team-a"' in page
    assert f'name="form_workspace" value="{ws_b.pk}"' in page
    response = alice_client.post(reverse("jobs:create"), {**data, "form_workspace": str(ws_b.pk)})
    assert response.status_code == 302
    assert Job.objects.get().workspace == ws_b


def test_it_ignores_a_stray_bid_on_a_quota_job(alice_client):
    response = alice_client.post(
        reverse("jobs:create"), quota_form(**{"roles-0-spot_discount_limit": "0.4"})
    )
    assert response.status_code == 302
    assert Job.objects.get().roles.get().spot_discount_limit is None


def test_it_rejects_both_spot_limits_beside_the_price_field(alice_client):
    data = spot_form(**{"roles-0-spot_price_limit": "0.011"})
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200
    assert "set only one" in field_error(response, "id_roles-0-spot_price_limit")
    assert Job.objects.count() == 0


def test_it_rejects_a_discount_off_the_list(alice_client):
    response = alice_client.post(
        reverse("jobs:create"), spot_form(**{"roles-0-spot_discount_limit": "0.45"})
    )
    assert response.status_code == 200
    message = field_error(response, "id_roles-0-spot_discount_limit")
    assert message == "must be one of 0.1, 0.2 … 0.9"
    assert Job.objects.count() == 0


def test_it_puts_the_second_roles_error_on_the_second_row(alice_client):
    data = spot_form(
        **{
            "roles-1-enabled": "on",
            "roles-1-instance_type": "ecs.g7.xlarge",
            "roles-1-spot_discount_limit": "0.45",
        }
    )
    response = alice_client.post(reverse("jobs:create"), data)
    assert "must be one of" in field_error(response, "id_roles-1-spot_discount_limit")
    assert 'id="id_roles-0-spot_discount_limit_error"' not in response.content.decode()
    assert Job.objects.count() == 0


def test_it_requires_a_command(alice_client):
    response = alice_client.post(reverse("jobs:create"), spot_form(user_command="  "))
    assert response.status_code == 200
    assert field_error(response, "id_user_command") == "is required"
    assert Job.objects.count() == 0


def test_it_rejects_a_pod_count_of_zero(alice_client):
    response = alice_client.post(reverse("jobs:create"), spot_form(**{"roles-0-pod_count": "0"}))
    assert response.status_code == 200
    assert field_error(response, "id_roles-0-pod_count") == "must be from 1 to 1000"
    assert Job.objects.count() == 0


def test_it_requires_a_vpc_for_lingjun_spot(alice_client):
    data = spot_form(resource_type="Lingjun", **{"roles-0-instance_type": "ml.gu8xf.8xlarge-gu108"})
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200
    for field in ("vpc_id", "vswitch_id", "security_group_id"):
        assert field_error(response, f"id_{field}") == "is required for Lingjun spot jobs"
    assert Job.objects.count() == 0


def test_it_rejects_a_price_limit_outside_the_range(alice_client):
    data = spot_form(
        **{
            "roles-0-spot_limit_type": "price",
            "roles-0-spot_discount_limit": "",
            "roles-0-spot_price_limit": "0.02",
        }
    )
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200
    message = field_error(response, "id_roles-0-spot_price_limit")
    assert "market price range ¥0.001333–¥0.013333 per minute" in message
    assert Job.objects.count() == 0


def test_a_name_that_would_read_backwards_is_refused_beside_its_field(alice_client):
    response = alice_client.post(
        reverse("jobs:create"), spot_form(display_name="train\u202egnp.exe")
    )
    assert response.status_code == 200
    message = "must not contain control or text-direction characters"
    assert field_error(response, "id_display_name") == message
    assert Job.objects.count() == 0


IMAGE_REFERENCE = (
    "must be an image reference (registry/name:tag): printable ASCII without spaces, at most "
    "512 characters"
)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("image", "bad image name", IMAGE_REFERENCE),
        ("image", "<img src=x onerror=alert(1)>", IMAGE_REFERENCE),
        ("roles-0-image", "pytorch:2.3 --privileged", IMAGE_REFERENCE),
        (
            "max_running_time_minutes",
            "999999999999999999",
            "must be from 1 to 5,270,400 minutes (ten years)",
        ),
        ("max_running_time_minutes", "0", "must be from 1 to 5,270,400 minutes (ten years)"),
    ],
)
def test_it_refuses_what_no_job_could_run_with_beside_its_field(
    alice_client, field, value, message
):
    response = alice_client.post(reverse("jobs:create"), spot_form(**{field: value}))
    assert response.status_code == 200
    assert field_error(response, f"id_{field}") == message
    assert Job.objects.count() == 0


def test_it_takes_the_longest_running_time_and_an_image_with_a_registry(alice_client):
    data = spot_form(
        max_running_time_minutes="5270400", image="registry.local:5000/team/pytorch:2.3"
    )
    assert alice_client.post(reverse("jobs:create"), data).status_code == 302
    assert Job.objects.get().max_running_time_minutes == 5_270_400


UNDER_DATA = "mount path must be a path under /mnt/data/"
MOUNTED = "mount path is the mount path of a data source before it: each needs its own"


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (
            "oss://b /etc/passwd\noss://c ../../x\njustone",
            [
                "line 3: write the URI and the mount path, separated by a space",
                f"line 1: {UNDER_DATA}",
                f"line 2: {UNDER_DATA}",
            ],
        ),
        ("oss://b /etc\noss://c /tmp", [f"line 1: {UNDER_DATA}", f"line 2: {UNDER_DATA}"]),
        ("\n\noss://b /etc", [f"line 3: {UNDER_DATA}"]),
        ("oss://a /mnt/data/x\noss://b x/\noss://c y", [f"line 2: {MOUNTED}"]),
        (
            "oss://a x/y\noss://b /mnt/data/x",
            [
                "line 2: mount path is inside or around /mnt/data/x/y, the mount path of a data "
                "source before it: mount paths must not nest"
            ],
        ),
    ],
    ids=["format-and-paths", "two-paths", "after-blank-lines", "same-mount-path", "nested"],
)
def test_it_says_every_bad_data_source_line(alice_client, lines, says):
    response = alice_client.post(reverse("jobs:create"), spot_form(data_sources=lines))
    assert response.status_code == 200
    shown = field_error(response, "id_data_sources")
    assert re.split(r"\s{2,}", shown) == says
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("language", "says"),
    [
        ("en", "Data sources: line 1: mount path must be a path under /mnt/data/"),
        ("zh-hans", "数据源: 第 1 行：挂载路径 必须是 /mnt/data/ 下的路径"),
    ],
)
def test_a_bad_data_source_is_named_as_the_form_names_it(alice_client, language, says):
    """The form's words (its help: "the source URI, a space, the mount path"), not the
    spec's field name mount_path, in the reader's language."""
    response = alice_client.post(
        reverse("jobs:create"),
        spot_form(data_sources="oss://b /etc"),
        headers={"Accept-Language": language},
    )
    assert response.status_code == 200
    assert error_summary(response) == [says]
    assert "mount_path" not in field_error(response, "id_data_sources")


def test_it_takes_a_description_and_a_grace_period(alice_client):
    data = spot_form(description="lr 0.1, second try\n", termination_grace_seconds="300")
    assert alice_client.post(reverse("jobs:create"), data).status_code == 302
    job = Job.objects.get()
    assert (job.description, job.termination_grace_seconds) == ("lr 0.1, second try\n", 300)
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert '<dd id="description">lr 0.1, second try<br></dd>' in page


def test_an_empty_grace_period_is_the_default_30_seconds(alice_client):
    assert alice_client.post(reverse("jobs:create"), spot_form()).status_code == 302
    assert Job.objects.get().termination_grace_seconds == 30


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("description", "d" * 4097, "must be at most 4096 characters"),
        ("termination_grace_seconds", "-1", "must be from 0 to 86400 seconds"),
        ("termination_grace_seconds", "86401", "must be from 0 to 86400 seconds"),
    ],
)
def test_it_refuses_a_description_or_grace_period_out_of_range(alice_client, field, value, says):
    """CreateJob's rules (the spec's), beside the form's input."""
    response = alice_client.post(reverse("jobs:create"), spot_form(**{field: value}))
    assert response.status_code == 200
    assert field_error(response, f"id_{field}") == says
    assert not Job.objects.exists()


def test_it_lists_parse_errors_and_rule_errors_together(alice_client):
    data = spot_form(
        display_name="", priority="high", envs="NOT A PAIR", **{"roles-0-pod_count": "0"}
    )
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200
    assert field_error(response, "id_display_name") == "is required"
    assert field_error(response, "id_priority") == "Enter a whole number."
    assert "line 1: write KEY=VALUE" in field_error(response, "id_envs")
    assert field_error(response, "id_roles-0-pod_count") == "must be from 1 to 1000"
    assert Job.objects.count() == 0


def test_it_takes_tags_shows_them_and_refuses_bad_ones(alice_client):
    response = alice_client.post(reverse("jobs:create"), spot_form(tags="team=vision\nrun=7"))
    assert response.status_code == 302
    job = Job.objects.get()
    assert dict(job.tags.values_list("key", "value")) == {"team": "vision", "run": "7"}
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert "team=vision" in page and "run=7" in page

    for tags, says in (("just-a-word", "line 1: write key=value"), ("aliyun:x=1", "reserved")):
        response = alice_client.post(reverse("jobs:create"), spot_form(tags=tags))
        assert response.status_code == 200
        assert says in field_error(response, "id_tags")
    assert Job.objects.count() == 1


def test_it_takes_a_hang_interval_with_aimaster(alice_client):
    data = spot_form(enable_aimaster="on", max_restarts="2", hang_seconds="5")
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200
    assert "from 10 to" in field_error(response, "id_hang_seconds")
    data["hang_seconds"] = "600"
    assert alice_client.post(reverse("jobs:create"), data).status_code == 302
    job = Job.objects.get()
    assert job.hang_seconds == 600
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert "hang detection 600 s" in page


def test_it_keeps_the_input_of_a_rejected_form(alice_client):
    data = spot_form(user_command="", display_name="keep-me")
    content = alice_client.post(reverse("jobs:create"), data).content.decode()
    assert 'value="keep-me"' in content
    assert '<option value="0.4" selected>' in content
    assert re.search(
        r'<input type="radio" name="resource_source" value="spot"[^>]*checked', content
    )


def test_it_rejects_a_quota_of_another_workspace(alice_client):
    response = alice_client.post(reverse("jobs:create"), quota_form(quota="team-b"))
    assert response.status_code == 200
    assert "Select a valid choice" in field_error(response, "id_quota")
    assert Job.objects.count() == 0


def test_it_shows_the_price_info_of_an_instance_type(alice_client):
    response = alice_client.get(
        reverse("jobs:price-info"),
        {
            "row": "1",
            "roles-1-enabled": "on",
            "roles-1-instance_type": "ecs.g7.xlarge",
            "roles-1-spot_discount_limit": "0.4",
            "roles-1-spot_price_limit": "0.011",
        },
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    content = response.content.decode()
    assert "<html" not in content
    assert "original (pay-as-you-go)\n                  ¥0.80/h" in content or "¥0.80/h" in content
    assert "¥0.001333–¥0.013333 per minute" in content
    assert "(¥0.08–¥0.80/h)" in content
    assert "SpotDiscountLimit 0.4 = <strong>¥0.32/h</strong>" in content
    assert "SpotPriceLimit ¥0.011000/min = <strong>¥0.66/h</strong>" in content


def test_it_warns_when_the_price_limit_is_outside_the_range(alice_client):
    response = alice_client.get(
        reverse("jobs:price-info"),
        {
            "row": "0",
            "roles-0-instance_type": "ecs.g7.xlarge",
            "roles-0-spot_price_limit": "0.5",
        },
    )
    assert "outside the range" in response.content.decode()


# --- list --------------------------------------------------------------------------------


def test_it_lists_the_workspace_jobs_with_pod_counts(alice_client, personas):
    make_job(personas, name="mine", pods=2)
    make_job(personas, name="theirs", workspace="ws_b", user="charlie")
    response = alice_client.get(reverse("jobs:list"))
    content = response.content.decode()
    assert "mine" in content and "theirs" not in content
    assert (
        '<span class="pods-in" title="In Quota">2</span> / '
        '<span class="pods-out" title="Not in Quota">0</span>'
    ) in content
    assert 'class="badge badge-running">Running</span>' in content


def test_it_lists_without_a_query_per_job(alice_client, personas, django_assert_max_num_queries):
    for i in range(5):
        make_job(personas, name=f"job-{i}", pods=2)
    with django_assert_max_num_queries(12):
        alice_client.get(reverse("jobs:list"))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"status": "Succeeded"}, {"done"}),
        ({"payment_type": "PrePaid"}, {"done", "borrower"}),
        ({"payment_type": "PostPaid"}, {"spotty"}),
        ({"quota": "team-a"}, {"done", "borrower"}),
        ({"idle_mode": "acceptable"}, {"borrower"}),
        ({"q": "SPOT"}, {"spotty"}),
    ],
)
def test_it_filters_the_list(alice_client, personas, query, expected):
    make_job(personas, name="done", status=JobStatus.SUCCEEDED)
    make_job(personas, name="borrower", idle_mode="acceptable")
    make_job(personas, name="spotty", source="spot", status=JobStatus.BIDDING)
    response = alice_client.get(reverse("jobs:list"), query)
    names = set(re.findall(r'<a href="/jobs/dlc\w+/">([^<]+)</a>', response.content.decode()))
    assert names == expected


def test_it_finds_a_job_by_its_id(alice_client, personas):
    job = make_job(personas, name="needle-job")
    make_job(personas, name="hay-job")  # a dash: no CSRF token on the page can hold it
    content = alice_client.get(reverse("jobs:list"), {"q": job.job_id}).content.decode()
    assert "needle-job" in content and "hay-job" not in content


def test_it_finds_jobs_by_a_tag_or_the_start_of_their_id(alice_client, personas):
    """The Tags help says tags are there to find a job again: `?q=team=vision` found none."""
    from apps.jobs.models import JobTag

    vision = make_job(personas, name="vision-run")
    speech = make_job(personas, name="speech-run")
    JobTag.objects.create(job=vision, key="team", value="vision")
    JobTag.objects.create(job=speech, key="team", value="speech")

    def found(q: str) -> set[str]:
        content = alice_client.get(reverse("jobs:list"), {"q": q}).content.decode()
        return {name for name in ("vision-run", "speech-run") if f">{name}</a>" in content}

    assert found("team=vision") == {"vision-run"}
    assert found("team") == {"vision-run", "speech-run"}  # a key: any value
    assert found("team=vis") == set()  # key and value exactly, as ListJobs' Tags filter
    assert found(vision.job_id[:9]) == {"vision-run"}
    page = alice_client.get(reverse("jobs:list")).content.decode()
    assert 'href="/jobs/?q=team%3Dvision"' in page  # a tag's chip finds its jobs
    detail = alice_client.get(reverse("jobs:detail", args=[vision.job_id])).content.decode()
    assert 'href="/jobs/?q=team%3Dvision"' in detail


def test_it_answers_htmx_filters_with_the_table_only(alice_client, personas):
    make_job(personas, name="done", status=JobStatus.SUCCEEDED)
    response = alice_client.get(
        reverse("jobs:list"),
        {"status": "Succeeded"},
        headers={"HX-Request": "true", "HX-Target": "job-table"},
    )
    content = response.content.decode()
    assert content.lstrip().startswith('<div id="job-table"')
    assert "<html" not in content and "done" in content
    assert "HX-Request" in response["Vary"]


def test_it_paginates_the_list(alice_client, personas, settings):
    settings.JOBS_PAGE_SIZE = 2
    start = timezone.now() - timedelta(hours=1)
    for i in range(5):
        make_job(personas, name=f"job-{i}", created=start + timedelta(minutes=i))
    first = alice_client.get(reverse("jobs:list")).content.decode()
    assert "job-4" in first and "job-3" in first and "job-2" not in first
    assert "Page 1 of 3" in first
    assert 'href="?page=2"' in first
    last = alice_client.get(reverse("jobs:list"), {"page": "3"}).content.decode()
    assert "job-0" in last and "job-1" not in last
    assert 'href="?page=2"' in last


def test_it_keeps_the_filters_in_the_page_links(alice_client, personas, settings):
    settings.JOBS_PAGE_SIZE = 1
    for i in range(3):
        make_job(personas, name=f"job-{i}", status=JobStatus.SUCCEEDED)
    content = alice_client.get(reverse("jobs:list"), {"status": "Succeeded"}).content.decode()
    assert 'href="?status=Succeeded&amp;page=2"' in content


def test_it_shows_an_empty_state_with_a_create_link(alice_client):
    content = alice_client.get(reverse("jobs:list")).content.decode()
    assert "No jobs yet" in content
    assert f'<a href="{reverse("jobs:create")}">Create a job</a>' in content


def test_it_shows_an_empty_state_for_filters_that_match_nothing(alice_client, personas):
    make_job(personas)
    content = alice_client.get(reverse("jobs:list"), {"status": "Failed"}).content.decode()
    assert "No jobs match these filters" in content


def test_it_ignores_an_unknown_filter_value(alice_client, personas):
    make_job(personas, name="still-here")
    response = alice_client.get(reverse("jobs:list"), {"status": "Exploded", "page": "99"})
    assert response.status_code == 200
    assert "still-here" in response.content.decode()


# --- detail, live fragment, stop ------------------------------------------------------------


def test_it_shows_a_job_with_its_pods_and_history(alice_client, personas):
    job = make_job(personas, pods=1)
    Job.objects.filter(pk=job.pk).update(
        attempt=1, restart_times=1, enable_aimaster=True, pending_reason="", sub_status="Training"
    )
    role = job.roles.get()
    Pod.objects.filter(job=job).update(
        attempt=0,
        status="Preempted",
        reason="Preempted",
        message="preempted by dlc-x of quota team-b",
    )
    Pod.objects.create(
        job=job,
        role=role,
        index=0,
        attempt=1,
        pod_id="current-pod",
        status="Running",
        in_quota=False,
    )
    content = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    pods, history = content.split('id="history-pods"')
    assert "current-pod" in pods and f"{job.job_id}-worker-0" not in pods
    assert f"{job.job_id}-worker-0" in history and "preempted by dlc-x" in history
    assert "Not in Quota" in pods
    assert "Restarts</dt><dd>1/3" in content
    assert "Training" in content
    assert 'hx-trigger="every 3s"' in content
    assert f'action="{reverse("jobs:stop", args=[job.job_id])}" data-confirm=' in content


def test_it_shows_why_a_job_is_pending_and_its_queue_position(alice_client, personas):
    job = make_job(personas, status=JobStatus.QUEUING)
    Job.objects.filter(pk=job.pk).update(
        pending_reason="quota team-a has 2 of 8 GPUs free", queue_position=3, queue_size=7
    )
    content = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert "quota team-a has 2 of 8 GPUs free" in content
    assert "position 3 of 7" in content


def test_it_hints_why_a_pending_job_waits_in_the_list(alice_client, personas):
    reason = "quota team-a: needs 8 GPU, 2 free; blocked behind three earlier jobs of the quota"
    waiting = make_job(personas, status=JobStatus.QUEUING, name="waiting")
    Job.objects.filter(pk=waiting.pk).update(pending_reason=reason, queue_position=3, queue_size=7)
    stale = make_job(personas, name="running")  # a reason left behind is not shown
    Job.objects.filter(pk=stale.pk).update(pending_reason="old reason")
    content = alice_client.get(reverse("jobs:list")).content.decode()
    full = f"{reason} — position 3 of 7 in the queue of quota team-a"  # waiting_text's words
    assert f'title="{full}">{reason[:47]}…</div>' in content
    assert "old reason" not in content


def test_it_shows_public_pool_pods_with_their_gpus_and_log_links(alice_client, personas):
    job = make_job(personas, source="public", pods=1)
    Pod.objects.filter(job=job).update(gpu_ids="0,1", in_quota=None)
    g7 = InstanceType.objects.get(name="ecs.g7.xlarge")
    JobRole.objects.filter(job=job).update(gpu=2, instance_type=g7)
    content = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    pod_id = f"{job.job_id}-worker-0"
    assert '<span class="pod-instance-type">ecs.g7.xlarge</span>' in content  # its type
    assert '<div class="sub muted">public pool</div>' in content
    assert '2 GPU<div class="sub mono" title="CUDA_VISIBLE_DEVICES">0,1</div>' in content
    assert f'<a href="{reverse("pods:logs", args=[pod_id])}" title="Logs of {pod_id}">' in content
    assert f'href="{reverse("pods:logs-download", args=[pod_id])}" download' in content


def test_it_offers_no_download_for_a_pod_that_never_started(alice_client, personas):
    job = make_job(personas, status=JobStatus.QUEUING, pods=1)
    Pod.objects.filter(job=job).update(status="Pending", started_at=None, node=None)
    content = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert reverse("pods:logs", args=[f"{job.job_id}-worker-0"]) in content
    assert "logs-download" not in content and "/logs/download/" not in content


def test_it_hides_another_workspaces_job(client, personas):
    job = make_job(personas)
    client.force_login(personas["charlie"])
    assert client.get(reverse("jobs:detail", args=[job.job_id])).status_code == 404
    assert client.post(reverse("jobs:stop", args=[job.job_id])).status_code == 404
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_it_shows_a_job_to_a_member_of_its_workspace(client, personas):
    job = make_job(personas)
    client.force_login(personas["bob"])
    assert client.get(reverse("jobs:detail", args=[job.job_id])).status_code == 200


def test_it_answers_404_for_an_unknown_job(alice_client):
    assert alice_client.get(reverse("jobs:detail", args=["dlcnope"])).status_code == 404


def test_it_stops_a_job(alice_client, personas):
    job = make_job(personas, pods=2)
    response = alice_client.post(reverse("jobs:stop", args=[job.job_id]), follow=True)
    assert response.redirect_chain == [(reverse("jobs:detail", args=[job.job_id]), 302)]
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    content = response.content.decode()
    assert f"Job {job.job_id} stopped." in content
    assert 'id="stop-job"' not in content  # no Stop button on a finished job
    assert 'hx-trigger="every 3s"' not in content


def test_it_reports_stopping_a_finished_job_as_a_message(alice_client, personas):
    job = make_job(personas, status=JobStatus.SUCCEEDED)
    response = alice_client.post(reverse("jobs:stop", args=[job.job_id]), follow=True)
    assert response.status_code == 200
    content = response.content.decode()
    assert 'class="message message-error"' in content
    assert "has already ended (Succeeded)" in content


def test_it_refuses_to_stop_with_get(alice_client, personas):
    job = make_job(personas)
    assert alice_client.get(reverse("jobs:stop", args=[job.job_id])).status_code == 405


def test_it_polls_the_live_fragment_while_the_job_runs(alice_client, personas):
    job = make_job(personas, pods=1)
    response = alice_client.get(
        reverse("jobs:detail", args=[job.job_id]),
        headers={"HX-Request": "true", "HX-Target": "job-live"},
    )
    assert response.status_code == 200
    content = response.content.decode()
    assert content.lstrip().startswith('<div id="job-live"')
    assert "<html" not in content
    assert 'hx-trigger="every 3s"' in content


def test_it_stops_polling_with_286_once_the_job_has_finished(alice_client, personas):
    job = make_job(personas, status=JobStatus.FAILED)
    response = alice_client.get(
        reverse("jobs:detail", args=[job.job_id]),
        headers={"HX-Request": "true", "HX-Target": "job-live"},
    )
    assert response.status_code == 286
    content = response.content.decode()
    assert 'class="badge badge-failed">Failed</span>' in content
    assert "hx-trigger" not in content


def test_it_shows_why_a_spot_job_bids_from_the_last_market_step(
    alice_client, personas, settings, tmp_path
):
    from apps.market.services import market_step
    from tests.integration.test_market_step import replay_writer, submit

    now = timezone.now()
    replay_writer(settings, tmp_path)([(now - timedelta(minutes=5), "ecs.g7.xlarge", "0.50")])
    low = submit(personas, discount="0.4", name="low-bid", now=now - timedelta(minutes=2))
    submit(personas, source="public", pods=5, name="payg", now=now - timedelta(minutes=3))
    submit(personas, discount="0.9", pods=16, name="big-gang", now=now - timedelta(minutes=2))
    fresh_detail = alice_client.get(reverse("jobs:detail", args=[low.job_id])).content.decode()
    assert "waiting for the next market step" in fresh_detail  # the type is not priced yet
    market_step(now=now - timedelta(minutes=1), rng=random.Random(1))
    detail = alice_client.get(reverse("jobs:detail", args=[low.job_id])).content.decode()
    assert "bid ¥0.32/h &lt; market ¥0.50/h for ecs.g7.xlarge" in detail
    listing = html_lib.unescape(alice_client.get(reverse("jobs:list")).content.decode())
    assert "bid ¥0.32/h < market ¥0.50/h for ecs.g7.xlarge" in listing
    assert "stock: needs 16 instances of ecs.g7.xlarge, 15 free" in listing


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("roles-0-cpu_cores", "1" + "0" * 40, "must be at most 10,000 cores per pod"),
        ("roles-0-cpu_cores", "1e308", "must be at most 10,000 cores per pod"),
        ("roles-0-memory_gib", "1e308", "must be at most 65,536 GiB per pod"),
        ("roles-0-gpus", "9" * 40, "must be at most 1,024 GPUs per pod"),
    ],
)
def test_it_refuses_a_resource_config_no_node_could_ever_hold(alice_client, field, value, says):
    response = alice_client.post(reverse("jobs:create"), quota_form(**{field: value}))
    assert response.status_code == 200  # the form again, with the error beside the field
    assert says in response.content.decode()
    assert not Job.objects.exists()


def error_summary(response) -> list[str]:
    """The lines of the summary above the form, as read."""
    content = response.content.decode()
    match = re.search(r'<ul class="error-summary" id="error-summary">(.*?)</ul>', content, re.S)
    assert match, "no error summary"
    items = re.findall(r"<li>(.*?)</li>", match[1], re.S)
    return [html_lib.unescape(re.sub(r"<[^>]+>", "", item)).strip() for item in items]


def test_it_lists_an_error_about_a_whole_role_in_the_summary(alice_client):
    data = quota_form(
        **{"roles-0-cpu_cores": "1", "roles-0-memory_gib": "4", "roles-0-gpus": "1000"}
    )
    response = alice_client.post(reverse("jobs:create"), data)
    assert response.status_code == 200
    [line] = error_summary(response)
    assert line.startswith("Role 1: one pod needs 1 core, 4 GiB, 1000 GPU, more than any node")
    assert 'href="#id_roles-0-role_type"' in response.content.decode()
    assert not Job.objects.exists()


def test_it_refuses_a_quota_job_that_could_never_start(alice_client):
    """team-a guarantees 8 GPU: 3 pods of 4 could never start without idle resources (in a
    StrictFIFO queue they would block every job behind them), and no node holds a pod of
    5 GPU at all. With idle resources the 12 GPU may be borrowed: accepted."""
    response = alice_client.post(
        reverse("jobs:create"), quota_form(**{"roles-0-pod_count": "3", "roles-0-gpus": "4"})
    )
    content = html_lib.unescape(response.content.decode())
    assert (
        "the job needs 24 cores, 96 GiB, 12 GPU in all, more than quota team-a guarantees"
        in content
        and "it could never start" in content
    )
    response = alice_client.post(reverse("jobs:create"), quota_form(**{"roles-0-gpus": "5"}))
    assert "more than any node of pool ecs-dedicated holds (the largest:" in html_lib.unescape(
        response.content.decode()
    )
    assert not Job.objects.exists()
    response = alice_client.post(
        reverse("jobs:create"),
        quota_form(**{"roles-0-pod_count": "3", "roles-0-gpus": "4", "idle_mode": "acceptable"}),
    )
    assert response.status_code == 302 and Job.objects.count() == 1


def test_it_creates_a_quota_job_on_a_share_of_a_gpu(alice_client):
    response = alice_client.post(reverse("jobs:create"), quota_form(**{"roles-0-gpus": "0.5"}))
    assert response.status_code == 302
    role = JobRole.objects.get()
    assert (role.gpu, role.gpu_milli, role.gpu_text) == (0, 500, "0.5")
    detail = alice_client.get(response["Location"]).content.decode()
    assert "0.5 GPU (a share of one GPU)" in detail
    listing = alice_client.get(reverse("jobs:list")).content.decode()
    assert '<td class="num job-gpus">0.5</td>' in listing  # as the job page writes it


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"roles-0-gpus": "1.5"}, "give whole GPUs, or a share of one GPU below 1"),
        ({"roles-0-gpus": "0.0005"}, "Ensure that there are no more than 3 decimal places."),
        (
            {"roles-0-gpus": "0.5", "roles-0-pod_count": "17"},
            "the job needs 136 cores, 544 GiB, 8.5 GPU in all, more than quota team-a",
        ),
    ],
)
def test_it_refuses_a_share_that_is_not_part_of_one_gpu_or_beyond_the_quota(
    alice_client, fields, says
):
    response = alice_client.post(reverse("jobs:create"), quota_form(**fields))
    assert response.status_code == 200
    assert says in html_lib.unescape(response.content.decode())
    assert not Job.objects.exists()


@pytest.mark.parametrize("aimaster, budget", [(False, "0/0"), (True, "1/3")])
def test_its_page_counts_restarts_against_the_budget_getjob_gives(
    alice_client, personas, aimaster, budget
):
    """Without AIMaster no restart may be spent: the page reads 0/0 as GetJob's
    RestartTimes does, not 0 of a max restarts nothing will spend."""
    job = make_job(personas)
    Job.objects.filter(pk=job.pk).update(
        enable_aimaster=aimaster, max_restarts=3, restart_times=int(aimaster)
    )
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert f"<dd>{budget}</dd>" in page
    assert re.search(rf'id="restart-count"><strong>{budget}</strong>', page)


def test_a_waiting_jobs_code_is_not_paired_with_a_message_of_an_earlier_state(
    alice_client, personas
):
    """A spot job re-bidding after a reclaim keeps the requeue's message while the market
    sets its code (SpotStockShortage): the page heads the code alone and says why it waits
    below, live."""
    job = make_job(personas, status=JobStatus.BIDDING, source="spot")
    Job.objects.filter(pk=job.pk).update(
        reason_code="SpotStockShortage",
        reason_message="Requeued: Spot instances reclaimed: stock short",
    )
    page = alice_client.get(reverse("jobs:detail", args=[job.job_id])).content.decode()
    assert "</span>: Requeued" not in page
    assert '<div class="alert alert-info" id="pending">' in page  # why it waits, live
