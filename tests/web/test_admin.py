"""The Django admin: every model has a working page; jobs, workspaces and pools show their
children inline; an AccessKey's secret is shown once, on creation, and never again; in
Chinese, its models and fields are named in the console's Chinese words."""

from __future__ import annotations

import re
from pathlib import Path

import polib
import pytest
from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.functional import Promise

from apps.cluster.clusterfile import cluster_file_check
from apps.cluster.models import InstanceType, Node, Quota, ResourcePool
from apps.cluster.selectors import cluster_state
from apps.jobs.models import Job, JobEvent, JobRole, Pod, StatusTransition
from apps.jobs.selectors import busy_node_names
from apps.workspaces.models import AccessKey, Workspace
from tests.factories import make_access_key

APPS = ("cluster", "workspaces", "jobs")


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def job(personas, cluster):
    now = timezone.now()
    job = Job.objects.create(
        workspace=personas["ws_a"],
        user=personas["alice"],
        display_name="resnet-50",
        user_command="python train.py",
        resource_source="quota",
        quota=cluster["team_a"],
        status="Running",
        submitted_at=now,
        status_changed_at=now,
    )
    role = JobRole.objects.create(
        job=job, role_type="Worker", pod_count=1, cpu=8000, memory=32768, gpu=2
    )
    pod = Pod.objects.create(
        job=job,
        role=role,
        index=0,
        pod_id=f"{job.job_id}-worker-0",
        node=cluster["nodes"][0],
        in_quota=True,
        status="Running",
    )
    StatusTransition.objects.create(job=job, status="Running", started_at=now)
    JobEvent.objects.create(
        job=job, pod=pod, at=now, kind="Scheduled", message="placed on gpu-node-0"
    )
    return job


def _registered():
    return [model for model in admin.site._registry if model._meta.app_label in APPS]


def test_it_registers_every_model(db):
    from django.apps import apps

    models = {m for label in APPS for m in apps.get_app_config(label).get_models()}
    assert models <= set(admin.site._registry)


def test_it_renders_every_changelist_and_add_page(admin_client, job):
    for model in _registered():
        prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        changelist = admin_client.get(reverse(f"{prefix}_changelist"))
        assert changelist.status_code == 200, model
        search = admin_client.get(reverse(f"{prefix}_changelist"), {"q": "a"})
        assert search.status_code == 200, model
        add = admin_client.get(reverse(f"{prefix}_add"))
        assert add.status_code in (200, 403), model


def test_it_shows_a_job_with_roles_pods_history_and_events(admin_client, job):
    body = admin_client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    for text in (
        "Worker",
        f"{job.job_id}-worker-0",
        "Status history",
        "placed on gpu-node-0",
        "gpu-node-0",
    ):
        assert text in body, text
    assert admin_client.get(reverse("admin:jobs_job_add")).status_code == 403


def test_a_pod_process_is_named_by_its_pod_id_and_state(admin_client, job):
    from apps.agent.models import PodProcess

    pod = job.pods.get()
    process = PodProcess.objects.create(
        pod=pod, queue="q", state=PodProcess.State.RUNNING, queued_at=timezone.now()
    )
    assert str(process) == f"{pod.pod_id} (Running)"
    page = admin_client.get(reverse("admin:agent_podprocess_change", args=[process.pk]))
    assert f"{pod.pod_id} (Running)" in page.content.decode()


def test_it_shows_memberships_under_a_workspace(admin_client, personas):
    ws = personas["ws_a"]
    body = admin_client.get(reverse("admin:workspaces_workspace_change", args=[ws.pk])).content
    assert b"membership_set" in body and b"alice" in body and b"bob" in body


def test_it_shows_nodes_under_a_pool(admin_client, cluster):
    pool = cluster["dedicated"]
    body = admin_client.get(reverse("admin:cluster_resourcepool_change", args=[pool.pk])).content
    assert b"gpu-node-3" in body


def test_an_instance_types_price_history_names_the_type_not_its_row_number(admin_client):
    itype = InstanceType.objects.create(
        name="ecs.g7.xlarge", resource_type="ECS", cpu=4000, memory=16384, price_per_hour="0.80"
    )
    itype.price_per_hour = "1.60"
    itype.save()
    page = admin_client.get(reverse("admin:cluster_instancetype_change", args=[itype.pk]))
    body = page.content.decode()
    # Each history row is titled by the change itself: the type's name, never its row id.
    assert re.search(r"ecs\.g7\.xlarge @ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: ¥1\.6000/h", body)
    assert not re.search(rf"<p>\s*{itype.pk} @ ", body)


def test_it_cordons_nodes(admin_client, cluster):
    ids = [n.pk for n in cluster["nodes"][:2]]
    admin_client.post(
        reverse("admin:cluster_node_changelist"), {"action": "cordon", "_selected_action": ids}
    )
    assert Node.objects.filter(status=Node.Status.CORDONED).count() == 2


def test_it_drains_nodes_moving_their_jobs_off(admin_client, job, cluster):
    node = cluster["nodes"][0]
    response = admin_client.post(
        reverse("admin:cluster_node_changelist"),
        {"action": "drain", "_selected_action": [node.pk]},
        follow=True,
    )
    assert "Drained 1 node: cordoned, 1 job moved off." in response.content.decode()
    node.refresh_from_db()
    job.refresh_from_db()
    assert node.status == Node.Status.CORDONED
    assert job.pods.get(attempt=0).reason == "NodeDrained"
    assert (job.attempt, job.restart_times, job.reason_code) == (1, 0, "NodeDrained")


def test_it_shows_a_draining_node_and_cordons_it_no_further(admin_client, cluster):
    """Cordon would leave a drain's remaining jobs where they are: a Draining node keeps
    draining (the watchdog finishes it); Mark Ready stops the drain."""
    node = cluster["nodes"][0]
    Node.objects.filter(pk=node.pk).update(status=Node.Status.DRAINING)
    url = reverse("admin:cluster_node_changelist")
    assert '<td class="field-status">Draining</td>' in admin_client.get(url).content.decode()
    admin_client.post(url, {"action": "cordon", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert node.status == Node.Status.DRAINING
    admin_client.post(url, {"action": "uncordon", "_selected_action": [node.pk]})
    node.refresh_from_db()
    assert node.status == Node.Status.READY


def test_it_refuses_more_gpus_on_a_node_than_the_scheduler_takes(admin_client, cluster):
    node = cluster["nodes"][0]
    gpus = node.gpu
    url = reverse("admin:cluster_node_change", args=[node.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None}
    response = admin_client.post(url, {**data, "gpu": 129})
    assert response.status_code == 200  # the form again, with the error
    assert "less than or equal to 128" in response.content.decode()
    node.refresh_from_db()
    assert node.gpu == gpus
    assert admin_client.post(url, {**data, "gpu": 128}).status_code == 302


def test_it_keeps_a_node_with_pods_from_shrinking_or_changing_pool(admin_client, job, cluster):
    """Its pods (2 GPUs of its 4) would hold more than it has, or stand in another pool;
    the cluster file refused neither. Drain it first; growing it is fine."""
    node = cluster["nodes"][0]
    Node.objects.create(  # room to spare: the pool's quotas would fit without node's GPUs
        name="spare", pool=node.pool, cpu=node.cpu, memory=node.memory, gpu=4, gpu_model="A100"
    )
    url = reverse("admin:cluster_node_change", args=[node.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None}
    lingjun = cluster["lingjun"].pk
    for change in ({"gpu": 1}, {"pool": lingjun}):
        response = admin_client.post(url, {**data, **change})
        assert response.status_code == 200, change  # the form again, with the error
        assert "has pods on it (Pending or Running): drain it first" in response.content.decode()
    node.refresh_from_db()
    assert (node.gpu, node.pool_id) == (4, cluster["dedicated"].pk)

    def file(gpu: int) -> dict:
        shape = {"vcpus": 96, "memory_gib": 768, "gpu": gpu, "gpu_model": "A100"}
        nodes = [{"name": node.name, **shape}]
        return {
            "pools": {
                "ecs-dedicated": {"kind": "dedicated", "resource_type": "ECS", "nodes": nodes}
            }
        }

    state = cluster_state(busy=busy_node_names())
    _, errors = cluster_file_check(file(2), existing=state, environ={})
    assert errors == [
        "pools.ecs-dedicated.nodes[0]: node 'gpu-node-0' has pods on it (Pending or Running): "
        "drain it first (the Nodes admin's Drain action moves its jobs off), then give it less"
    ]
    assert cluster_file_check(file(8), existing=state, environ={})[1] == []
    assert admin_client.post(url, {**data, "gpu": 8}).status_code == 302


def test_it_refuses_a_quota_edit_that_breaks_the_tree(admin_client, cluster, personas):
    team_a = cluster["team_a"]
    response = admin_client.post(
        reverse("admin:cluster_quota_change", args=[team_a.pk]),
        {
            "name": "team-a",
            "parent": cluster["root"].pk,
            "pool": cluster["dedicated"].pk,
            "resource_type": "ECS",
            "min_cpu": team_a.min_cpu,
            "min_memory": team_a.min_memory,
            "min_gpu": 12,
            "queue_strategy": "StrictFIFO",
            "workspaces": [personas["ws_a"].pk],
        },
    )
    assert response.status_code == 200
    assert "the children of &#x27;root-ecs&#x27; need 20 GPU" in response.content.decode()
    team_a.refresh_from_db()
    assert team_a.min_gpu == 8


def test_it_accepts_a_quota_edit_that_fits(admin_client, cluster, personas):
    team_a = cluster["team_a"]
    response = admin_client.post(
        reverse("admin:cluster_quota_change", args=[team_a.pk]),
        {
            "name": "team-a",
            "parent": cluster["root"].pk,
            "pool": cluster["dedicated"].pk,
            "resource_type": "ECS",
            "min_cpu": team_a.min_cpu,
            "min_memory": team_a.min_memory,
            "min_gpu": 6,
            "queue_strategy": "BestEffortFIFO",
            "workspaces": [personas["ws_a"].pk],
        },
    )
    assert response.status_code == 302
    assert Quota.objects.get(pk=team_a.pk).min_gpu == 6


# --- AccessKey secrets ---------------------------------------------------------------------


def test_it_shows_a_new_secret_once(admin_client, personas):
    response = admin_client.post(
        reverse("admin:workspaces_accesskey_add"),
        {
            "user": personas["alice"].pk,
            "description": "laptop",
            "enabled": "on",
        },
        follow=True,
    )
    assert response.status_code == 200
    key = AccessKey.objects.get(description="laptop")
    secret = key.secret()
    assert key.key_id.startswith("LTAI") and len(secret) >= 16
    assert secret in response.content.decode()  # the message, once
    again = admin_client.get(reverse("admin:workspaces_accesskey_changelist"))
    assert secret not in again.content.decode()
    change = admin_client.get(reverse("admin:workspaces_accesskey_change", args=[key.pk]))
    assert secret not in change.content.decode()
    assert key.secret_encrypted not in change.content.decode()
    assert not any(secret in (e.change_message + e.object_repr) for e in LogEntry.objects.all())


def test_it_never_shows_or_edits_an_existing_secret(admin_client, personas):
    key, secret = make_access_key(personas["bob"])
    url = reverse("admin:workspaces_accesskey_change", args=[key.pk])
    body = admin_client.get(url).content.decode()
    assert secret not in body and key.secret_encrypted not in body
    assert 'name="secret' not in body and 'name="key_id"' not in body
    admin_client.post(
        url,
        {
            "description": "renamed",
            "enabled": "on",
            "secret_encrypted": "forged",
            "key_id": "LTAIforged",
        },
    )
    key.refresh_from_db()
    assert key.description == "renamed"
    assert key.secret() == secret and key.key_id != "LTAIforged"


def test_it_rotates_a_secret_and_shows_the_new_one_once(admin_client, personas):
    key, old = make_access_key(personas["bob"])
    response = admin_client.post(
        reverse("admin:workspaces_accesskey_changelist"),
        {"action": "rotate_secret", "_selected_action": [key.pk]},
        follow=True,
    )
    key.refresh_from_db()
    assert key.secret() != old
    assert key.secret() in response.content.decode()


def test_it_disables_and_enables_keys(admin_client, personas):
    key, _ = make_access_key(personas["bob"])
    url = reverse("admin:workspaces_accesskey_changelist")
    admin_client.post(url, {"action": "disable", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert not key.enabled
    admin_client.post(url, {"action": "enable", "_selected_action": [key.pk]})
    key.refresh_from_db()
    assert key.enabled


def test_it_refuses_to_delete_a_node_pods_run_on(admin_client, job, cluster):
    """Deleting ecs-a100-0 under a running job left its pod Running on no node."""
    node = cluster["nodes"][0]
    url = reverse("admin:cluster_node_delete", args=[node.pk])

    page = admin_client.get(url).content.decode()
    response = admin_client.post(url, {"post": "yes"})
    bulk = admin_client.post(
        reverse("admin:cluster_node_changelist"),
        {"action": "delete_selected", "_selected_action": [node.pk], "post": "yes"},
    )

    assert "Cannot delete node" in page and "drain the node first" in page
    assert f"{job.job_id}-worker-0" in page
    assert response.status_code == 200 and bulk.status_code == 200
    assert Node.objects.filter(pk=node.pk).exists()
    assert job.pods.get().node == node


def test_it_deletes_a_node_once_no_pod_runs_on_it(admin_client, job, cluster):
    spare = Node.objects.create(
        name="gpu-node-spare", pool=cluster["dedicated"], cpu=96000, memory=768 * 1024, gpu=4
    )
    job.pods.update(node=spare, status="Succeeded")

    response = admin_client.post(
        reverse("admin:cluster_node_delete", args=[spare.pk]), {"post": "yes"}
    )

    assert response.status_code == 302
    assert not Node.objects.filter(pk=spare.pk).exists()


def test_it_refuses_to_delete_a_node_its_pools_quotas_need(admin_client, cluster):
    """With ecs-a100-0 deleted, ecs-root guaranteed 32 GPU of a pool holding 24, and the
    What if page's own cluster file was refused."""
    node = cluster["nodes"][3]
    url = reverse("admin:cluster_node_delete", args=[node.pk])

    page = admin_client.get(url).content.decode()
    admin_client.post(url, {"post": "yes"})

    assert "Cannot delete node" in page
    assert "guarantee 16 GPU (root-ecs 16 GPU), but its nodes hold 12 GPU" in page
    assert "lower the quotas&#x27; min first" in page
    assert Node.objects.filter(pk=node.pk).exists()


def test_it_refuses_a_node_edit_its_pools_quotas_do_not_fit(admin_client, cluster):
    node = cluster["nodes"][0]
    url = reverse("admin:cluster_node_change", args=[node.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None}

    response = admin_client.post(url, {**data, "gpu": 2})

    assert response.status_code == 200
    assert "but its nodes hold 14 GPU" in response.content.decode()
    node.refresh_from_db()
    assert node.gpu == 4
    assert admin_client.post(url, {**data, "gpu": 8}).status_code == 302


def test_a_pools_page_deletes_no_node(admin_client, cluster):
    pool = cluster["dedicated"]
    page = admin_client.get(reverse("admin:cluster_resourcepool_change", args=[pool.pk]))
    assert "nodes-0-DELETE" not in page.content.decode()


def _act(client, url, action, ids, language="en"):
    response = client.post(
        url,
        {"action": action, "_selected_action": ids},
        headers={"accept-language": language},
        follow=True,
    )
    return response.content.decode()


def test_the_node_actions_say_how_many_in_the_admins_language(admin_client, job, cluster):
    """They read "Cordoned 2 node(s).", "Drained 1 node(s): …, 1 job(s) moved off", in
    English on the admin's Chinese pages too."""
    url = reverse("admin:cluster_node_changelist")
    ids = [n.pk for n in cluster["nodes"][:2]]
    assert "Cordoned 2 nodes." in _act(admin_client, url, "cordon", ids)
    assert "Marked 1 node Ready." in _act(admin_client, url, "uncordon", ids[:1])
    assert "Cordoned 1 node." in _act(admin_client, url, "cordon", ids[:1])
    assert "Marked 2 nodes Ready." in _act(admin_client, url, "uncordon", ids)

    page = admin_client.get(url, headers={"accept-language": "zh-CN"}).content.decode()
    for label in ("封锁：不再向所选节点调度新的 Pod", "排空：封锁所选节点", "将所选节点标记为就绪"):
        assert label in page, label
    assert "已封锁 2 个节点。" in _act(admin_client, url, "cordon", ids, "zh-CN")
    assert "已将 2 个节点标记为就绪（Ready）。" in _act(admin_client, url, "uncordon", ids, "zh-CN")
    drained = _act(admin_client, url, "drain", ids[:1], "zh-CN")
    assert "已排空 1 个节点：已封锁，迁出 1 个任务。" in drained
    assert "node(s)" not in drained and "job(s)" not in drained
    assert "内存（GiB）" in drained  # a column of the list


def test_the_key_actions_say_how_many_in_the_admins_language(admin_client, personas):
    keys = [make_access_key(personas["bob"])[0] for _ in range(2)]
    url = reverse("admin:workspaces_accesskey_changelist")
    ids = [k.pk for k in keys]
    assert "Disabled 2 keys." in _act(admin_client, url, "disable", ids)
    assert "Enabled 1 key." in _act(admin_client, url, "enable", ids[:1])
    assert "已启用 1 个密钥。" in _act(admin_client, url, "enable", ids, "zh-CN")
    rotated = _act(admin_client, url, "rotate_secret", ids[:1], "zh-CN")
    assert f"用户 bob 的 AccessKey {keys[0].key_id}：其 Secret 为 " in rotated
    page = admin_client.get(url, headers={"accept-language": "zh-CN"}).content.decode()
    assert "禁用所选密钥" in page and "轮换所选密钥的 Secret（仅显示一次）" in page


# --- in Chinese ----------------------------------------------------------------------------

ZH = {"accept_language": "zh-CN"}
CATALOGUE = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"

# The main models: their names in Chinese (one, many) and labels their change form shows.
IN_CHINESE = {
    Node: ("节点", "节点", ("资源池", "实例规格", "GPU 数", "GPU 型号", "最近心跳", "毫核")),
    Quota: ("资源配额", "资源配额", ("上级配额", "资源池", "Min GPU 数", "排队策略")),
    ResourcePool: ("资源池", "资源池", ("名称", "类型", "资源类型")),
    InstanceType: ("实例规格", "实例规格", ("GPU 型号", "每小时价格", "公共资源容量")),
    Workspace: ("工作空间", "工作空间", ("显示名称", "描述", "工作空间成员")),
    Job: ("任务", "训练任务", ("任务名称", "执行命令", "资源来源", "子状态", "状态历史")),
}


def _column_headers(changelist: str) -> list[str]:
    table = changelist[changelist.index('id="result_list"') :]
    cells = re.findall(r'<th scope="col".*?</th>', table, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells]


@pytest.fixture
def zh_admin(client, admin_user):
    """An admin signed in through the admin's own sign-in page, in a browser asking for
    Chinese."""
    page = client.get(reverse("admin:login"), headers=ZH).content.decode()
    assert "登录" in page
    response = client.post(
        reverse("admin:login"), {"username": "admin", "password": "password"}, headers=ZH
    )
    assert response.status_code == 302
    return client


def test_the_admin_names_its_models_and_fields_in_chinese(zh_admin, job, cluster, personas):
    index = zh_admin.get(reverse("admin:index"), headers=ZH).content.decode()
    for app in ("集群", "训练", "工作空间", "竞价市场", "计费", "节点 Agent"):
        assert f">{app}</a>" in index, app
    assert ">节点 Agent</a>" in index  # its model, as its app and the health page name it
    objects = {
        Node: cluster["nodes"][0],
        Quota: cluster["team_a"],
        ResourcePool: cluster["dedicated"],
        InstanceType: InstanceType.objects.first(),
        Workspace: personas["ws_a"],
        Job: job,
    }
    for model, (one, many, labels) in IN_CHINESE.items():
        opts = model._meta
        assert f">{many}</a>" in index, model
        with translation.override("en"):
            english = str(opts.verbose_name_plural).capitalize()
        assert f">{english}</a>" not in index, english  # no English left
        prefix = f"admin:{opts.app_label}_{opts.model_name}"
        changelist = zh_admin.get(reverse(f"{prefix}_changelist"), headers=ZH)
        assert f"选择 {one} 来修改" in changelist.content.decode(), model
        form = zh_admin.get(reverse(f"{prefix}_change", args=[objects[model].pk]), headers=ZH)
        page = form.content.decode()
        assert f"修改 {one}" in page, model
        for label in labels:
            assert label in page, (model, label)
    nodes = zh_admin.get(reverse("admin:cluster_node_changelist"), headers=ZH).content.decode()
    assert _column_headers(nodes)[1:] == [
        *("名称", "资源池", "实例规格", "状态", "GPU 数", "GPU 型号", "CPU（核）", "内存（GiB）"),
        "最近心跳",
    ]
    assert "封锁：不再向所选节点调度新的 Pod" in nodes  # an action
    assert "以 资源池" in nodes  # a filter


def test_every_model_in_the_admin_has_a_chinese_name_for_itself_and_its_fields():
    """Its name, its app's, and every field's label and help: lazy translations whose
    English is in the catalogue, translated."""
    translated = {e.msgid for e in polib.pofile(str(CATALOGUE)).translated_entries()}
    untranslated = []
    for model in admin.site._registry:
        opts = model._meta
        if opts.app_label in ("auth",):  # Django's own, translated by Django
            continue
        texts = {
            f"{opts.app_label}": apps.get_app_config(opts.app_label).verbose_name,
            f"{opts.label}": opts.verbose_name,
            f"{opts.label} (plural)": opts.verbose_name_plural,
        }
        for field in opts.get_fields():
            if not field.auto_created:
                texts[f"{opts.label}.{field.name}"] = field.verbose_name
                if field.help_text:
                    texts[f"{opts.label}.{field.name} (help)"] = field.help_text
        for where, text in texts.items():
            with translation.override("en"):
                english = str(text)
            if not isinstance(text, Promise) or english not in translated:
                untranslated.append(f"{where}: {english}")
    assert untranslated == []


def test_it_refuses_to_delete_a_node_in_the_readers_language(zh_admin, job, cluster):
    busy = reverse("admin:cluster_node_delete", args=[cluster["nodes"][0].pk])
    needed = reverse("admin:cluster_node_delete", args=[cluster["nodes"][3].pk])

    page = zh_admin.get(busy, headers=ZH).content.decode()
    other = zh_admin.get(needed, headers=ZH).content.decode()

    assert f"任务 {job.job_id} 的 Pod {job.job_id}-worker-0（Running）" in page
    assert "请先排空该节点" in page and "drain the node first" not in page
    assert "请先调低配额的 min" in other and "lower the quotas" not in other


def test_the_admin_filters_by_statuses_and_types_named_as_the_console_names_them(zh_admin, job):
    """Choices without labels were named after their constants: "Env Preparing", "Pytorch",
    "Ps", "On Failure", in English in either language."""
    jobs = zh_admin.get(reverse("admin:jobs_job_changelist"), headers=ZH).content.decode()
    roles = zh_admin.get(reverse("admin:jobs_jobrole_changelist"), headers=ZH).content.decode()
    processes = zh_admin.get(reverse("admin:agent_podprocess_changelist"), headers=ZH)

    assert "环境准备中" in jobs and "运行中" in jobs and "Env Preparing" not in jobs
    assert "PyTorchJob" in jobs and "Pytorch" not in jobs
    assert ">PS</a>" in roles and ">OnFailure</a>" in roles and "On Failure" not in roles
    assert "已退出" in processes.content.decode()


def test_nodes_and_instance_types_head_their_cores_column_as_people_write_it(admin_client, cluster):
    """The admin capitalises a column's first letter: "vCPUs" read "VCPUs", "vCPU" "VCPU"."""
    for changelist in ("admin:cluster_node_changelist", "admin:cluster_instancetype_changelist"):
        english = admin_client.get(reverse(changelist)).content.decode()
        chinese = admin_client.get(reverse(changelist), headers=ZH).content.decode()
        assert "CPU (cores)" in _column_headers(english)
        assert "CPU（核）" in _column_headers(chinese)
        assert "VCPU" not in english + chinese


def test_the_admin_gives_a_jobs_stored_messages_in_the_readers_language(zh_admin, job):
    """Reasons and events are stored in English; the console reads them out in Chinese,
    and the admin showed them as stored."""
    job.reason_message = "All pods are running"
    job.save(update_fields=["reason_message"])
    JobEvent.objects.create(
        job=job, at=timezone.now(), kind="Submitted", message="Submitted by alice"
    )
    job.status_history.update(reason_message="Waiting in the queue")
    url = reverse("admin:jobs_job_change", args=[job.pk])

    chinese = zh_admin.get(url, headers=ZH).content.decode()
    english = zh_admin.get(url, headers={"accept_language": "en"}).content.decode()
    events = zh_admin.get(reverse("admin:jobs_jobevent_changelist"), headers=ZH).content.decode()

    assert "所有 Pod 均在运行" in chinese and "All pods are running" not in chinese
    assert "由 alice 提交" in chinese and "正在排队" in chinese
    assert re.search(r"等待原因:</label>\s*<div[^>]*>-</div>", chinese)  # none, as others
    assert "All pods are running" in english and "Submitted by alice" in english
    assert '<td class="field-message_said">由 alice 提交</td>' in events


def test_the_date_filter_above_a_history_is_named_in_chinese(zh_admin):
    """Django's own catalogue has no Chinese for the date hierarchy's "Filter by …"."""
    InstanceType.objects.create(
        name="ecs.g7.xlarge", resource_type="ECS", cpu=4000, memory=16384, price_per_hour="0.80"
    )
    page = zh_admin.get(reverse("admin:cluster_originalprice_changelist"), headers=ZH)
    body = page.content.decode()
    assert "按 时间 筛选" in re.sub(r"\s+", " ", body)
    assert "Filter by" not in body
