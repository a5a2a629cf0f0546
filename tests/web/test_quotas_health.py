"""The quota page, the health panel and /healthz."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.urls import reverse
from django.utils import timezone

from apps.agent.runner import Isolation
from apps.agent.services import agent_heartbeat
from apps.cluster.models import Node
from apps.core.selectors import Health
from apps.core.services import heartbeat_record
from apps.jobs.models import Job, JobRole, JobStatus, Pod, PodStatus
from apps.scheduler.selectors import quota_history_chart, quota_page, quota_usage_rows

GIB = 1024


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_job(
    personas, quota, *, pods, cpu=8000, memory=32 * GIB, gpu=2, status="Running", idle_mode="off"
):
    """A quota job whose pods are given as (status, node name or None, in_quota)."""
    now = timezone.now()
    job = Job.objects.create(
        workspace=personas["ws_a"],
        user=personas["alice"],
        display_name="train",
        user_command="python train.py",
        resource_source="quota",
        quota=quota,
        idle_mode=idle_mode,
        status=status,
        submitted_at=now,
        status_changed_at=now,
    )
    role = JobRole.objects.create(
        job=job, role_type="Worker", pod_count=len(pods), cpu=cpu, memory=memory, gpu=gpu
    )
    for i, (pod_status, node, in_quota) in enumerate(pods):
        Pod.objects.create(
            job=job,
            role=role,
            index=i,
            pod_id=f"{job.job_id}-worker-{i}",
            node=Node.objects.get(name=node) if node else None,
            in_quota=in_quota,
            status=pod_status,
        )
    return job


@pytest.fixture
def busy(cluster, personas):
    """team-a: 2 In Quota pods (4 GPU) and a borrower pod (2 GPU, Not in Quota); team-b: one
    placed pending pod (1 GPU), one unplaced; finished pods count for nothing."""
    make_job(
        personas,
        cluster["team_a"],
        pods=[
            (PodStatus.RUNNING, "gpu-node-0", True),
            (PodStatus.RUNNING, "gpu-node-0", True),
            (PodStatus.SUCCEEDED, "gpu-node-1", True),
        ],
    )
    make_job(
        personas,
        cluster["team_a"],
        idle_mode="acceptable",
        pods=[(PodStatus.RUNNING, "gpu-node-1", False)],
    )
    make_job(
        personas,
        cluster["team_b"],
        gpu=1,
        memory=16 * GIB,
        status=JobStatus.QUEUING,
        pods=[
            (PodStatus.PENDING, "gpu-node-2", True),
            (PodStatus.PENDING, None, None),
        ],
    )
    make_job(
        personas,
        cluster["team_b"],
        status=JobStatus.FAILED,
        pods=[(PodStatus.PREEMPTED, "gpu-node-3", False)],
    )
    return cluster


def _row(rows, name):
    return next(r for group in rows.values() for r in group if r.quota.name == name)


# --- Quotas -------------------------------------------------------------------------------


def test_it_sums_in_quota_use_over_the_subtree(busy):
    rows = quota_usage_rows()
    team_a, team_b, root = _row(rows, "team-a"), _row(rows, "team-b"), _row(rows, "root-ecs")
    # GPUs in milli-GPUs (a share of a GPU counts its part)
    assert (team_a.gpu.used, team_a.cpu.used, team_a.memory.used) == (4000, 16000, 64 * GIB)
    assert (team_b.gpu.used, team_b.cpu.used) == (1000, 8000)
    assert (root.gpu.used, root.memory.used) == (5000, 80 * GIB)
    assert [r.depth for r in rows["ECS"]] == [0, 1, 1]
    assert team_a.workspaces == ["team-a"]


def test_it_shows_borrowed_and_lent(busy):
    rows = quota_usage_rows()
    team_a, team_b, root = _row(rows, "team-a"), _row(rows, "team-b"), _row(rows, "root-ecs")
    assert (team_a.gpu.borrowed, team_b.gpu.borrowed, root.gpu.borrowed) == (2000, 0, 2000)
    # The pool's 16 GPUs are all guaranteed: root-ecs lends the 2 borrowed GPUs, split
    # between its children by their free min (team-a 8 − 4, team-b 8 − 1), in milli-GPUs.
    assert (team_a.gpu.lent, team_b.gpu.lent, root.gpu.lent) == (727, 1272, 2000)
    assert _row(rows, "lingjun-a").gpu.lent == 0


def test_it_says_who_borrows_from_whom(busy):
    _, pools = quota_page()
    assert [p.pool.name for p in pools] == ["ecs-dedicated"]
    loans = {(row.borrower.name, row.lender.name): row.gpu.used for row in pools[0].loans}
    assert loans == {("team-a", "team-a"): 727, ("team-a", "team-b"): 1272}
    first = pools[0].loans[0]
    assert [job.idle_mode for job in first.jobs] == ["acceptable"]
    assert pools[0].loans[1].jobs == []  # the borrower's jobs are named once


def _lending_rows(body: str) -> list[str]:
    table = body[body.index('class="table lending-table"') :]
    table = table[table.index("<tbody>") : table.index("</tbody>")]
    return [" ".join(row.split()) for row in table.split("<tr>")[1:]]


def test_a_quota_running_idle_jobs_on_its_own_free_guarantee_borrows_from_no_one(
    alice_client, busy, personas
):
    """team-b's Only Idle job ran on idle room that is partly team-b's own free guarantee:
    the page read "team-b borrows 0.8 GPU from team-b". The attribution stays (it is the
    scheduler's rule); the page says what it is."""
    make_job(
        personas,
        busy["team_b"],
        gpu=1,
        idle_mode="only_idle",
        pods=[(PodStatus.RUNNING, "gpu-node-3", False)],
    )
    _, pools = quota_page()
    own = [(r.borrower.name, r.gpu.used) for r in pools[0].loans if r.own]
    assert own == [("team-a", 726), ("team-b", 636)]  # the accounting is unchanged

    body = alice_client.get(reverse("scheduler:quotas")).content.decode()
    rows = _lending_rows(body)
    team_b = [row for row in rows if ">team-b</a></strong>" in row]
    assert len(team_b) == 2
    assert "its own idle guarantee" in team_b[0] and "0.636" in team_b[0]
    team_a_url = reverse("scheduler:quota", args=["team-a"])
    assert f'href="{team_a_url}">team-a</a>' in team_b[1]  # a loan from another quota
    for row in rows:  # no quota is its own lender
        borrower, lender = row.split("</td>")[:2]
        assert borrower.split('href="')[1].split('"')[0] not in lender
    assert "its own jobs: 0.636 · 4.1 · 16.3</div>" in body

    page = alice_client.get(reverse("scheduler:quota", args=["team-b"])).content.decode()
    own_rows = [row for row in _lending_rows(page) if "its own idle guarantee" in row]
    assert len(own_rows) == 1 and "0.636" in own_rows[0]
    assert "of which to its own idle jobs" in page
    chinese = alice_client.get(reverse("scheduler:quotas"), headers={"Accept-Language": "zh-hans"})
    assert "自身空闲的保障量" in chinese.content.decode()


def test_it_reads_usage_in_few_queries_whatever_the_size(
    busy, personas, django_assert_max_num_queries
):
    for _ in range(5):
        make_job(personas, busy["team_b"], pods=[(PodStatus.RUNNING, "gpu-node-3", True)] * 2)
        make_job(
            personas,
            busy["team_a"],
            idle_mode="only_idle",
            pods=[(PodStatus.RUNNING, "gpu-node-3", False)],
        )
    # quotas, workspaces, in-quota and borrowed sums, capacity; per borrowing quota its
    # jobs, and their count when there are more than the page names (team-a: 6)
    with django_assert_max_num_queries(7):
        quota_page()


def test_it_computes_bar_widths(busy):
    team_a = _row(quota_usage_rows(), "team-a")
    assert team_a.gpu.percent == 50 and not team_a.gpu.over
    assert team_a.memory.used_text == "64" and team_a.memory.min_text == "1536"


def test_it_requires_a_login_for_quotas(client, db):
    response = client.get(reverse("scheduler:quotas"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_renders_the_quota_tree(alice_client, busy):
    response = alice_client.get(reverse("scheduler:quotas"))
    assert response.status_code == 200
    body = response.content.decode()
    for text in (
        "root-ecs",
        "team-a",
        "lingjun-a",
        "General computing (ECS)",
        "Lingjun",
        'aria-label="4 of 8 GPU in use (50%)"',
        'style="width: 50%"',
        'class="quota-mine"',
        'hx-trigger="every 10s"',
        "Who borrows from whom in ecs-dedicated",
        "0.727",
    ):
        assert text in body, text


def test_it_serves_the_quota_tables_as_a_fragment(alice_client, busy):
    response = alice_client.get(reverse("scheduler:quotas"), headers={"HX-Request": "true"})
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="quota-tables"')
    assert "<html" not in body and "team-b" in body


def test_a_quotas_use_over_time_follows_its_pods_start_and_finish(busy, personas):
    now = timezone.now()
    hour = timedelta(hours=1)
    old = make_job(
        personas,
        busy["team_a"],
        gpu=4,
        status=JobStatus.SUCCEEDED,
        pods=[(PodStatus.SUCCEEDED, "gpu-node-2", True)],
    )
    old.pods.update(started_at=now - 5 * hour, finished_at=now - 3 * hour)
    Pod.objects.filter(job__quota=busy["team_a"], status=PodStatus.RUNNING).update(
        started_at=now - 2 * hour
    )
    chart = quota_history_chart(busy["root"], window="6h", now=now)
    series = {s["kind"]: s["values"] for s in chart.data["series"]}
    times = chart.data["t"]

    def at(kind: str, hours_ago: float) -> float:
        moment = (now - timedelta(hours=hours_ago)).timestamp()
        index = max(i for i, t in enumerate(times) if t <= moment)
        return series[kind][index]

    # a child's pods count for the root: 4 GPU from 5 h to 3 h ago, then 2 + 2 from 2 h ago
    assert (at("in_quota", 5.5), at("in_quota", 4), at("in_quota", 2.5)) == (0, 4, 0)
    assert (at("in_quota", 1), at("borrowed", 1), at("borrowed", 3)) == (4, 2, 0)
    assert set(series["min"]) == {16}
    cpu = quota_history_chart(busy["team_a"], resource="cpu", window="6h", now=now)
    assert max(v for s in cpu.data["series"] if s["kind"] == "in_quota" for v in s["values"]) == 16


def test_it_renders_a_quotas_page(alice_client, busy):
    url = reverse("scheduler:quota", args=["team-a"])
    body = alice_client.get(url, {"window": "7d", "resource": "memory"}).content.decode()
    for text in ("team-a", "Use over time", 'aria-current="true">7d', "Memory GiB", "team-b"):
        assert text in body, text
    assert "<polyline" in body  # the chart is drawn on the server
    fragment = alice_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="quota-history"')
    bad = alice_client.get(url, {"window": "1y", "resource": "disk"})
    assert bad.status_code == 200 and 'aria-current="true">24h' in bad.content.decode()
    assert alice_client.get(reverse("scheduler:quota", args=["nobody"])).status_code == 404
    tree = alice_client.get(reverse("scheduler:quotas")).content.decode()
    assert f'href="{url}"' in tree


def test_it_says_when_there_are_no_quotas(alice_client, personas):
    from apps.cluster.models import Quota

    Quota.objects.filter(parent__isnull=False).delete()
    Quota.objects.all().delete()
    assert "No quotas yet" in alice_client.get(reverse("scheduler:quotas")).content.decode()


# --- Health -------------------------------------------------------------------------------


def _snapshot(**overrides) -> Health:
    values = {
        "beat_last_seen": timezone.now() - timedelta(seconds=4),
        "beat_ok": True,
        "workers": ["celery@agent-1"],
        "broker_ok": True,
        "broker_error": "",
    }
    return Health(**{**values, **overrides})


@pytest.fixture
def fake_health(monkeypatch):
    def use(snapshot: Health) -> None:
        monkeypatch.setattr("apps.ops.views.health_snapshot", lambda **kwargs: snapshot)

    return use


def test_it_requires_a_login_for_health(client, db):
    assert client.get(reverse("ops:health")).status_code == 302


def test_it_shows_beat_workers_nodes_and_jobs(admin_client, busy, fake_health, clock):
    fake_health(_snapshot())
    Node.objects.filter(name="gpu-node-3").update(status=Node.Status.LOST)
    body = admin_client.get(reverse("ops:health")).content.decode()
    assert "Running" in body and "Last heartbeat 4 s ago" in body
    assert "1 worker answered a ping" in body and "celery@agent-1" in body
    assert '<span>Ready</span><span class="count">4</span>' in body
    assert '<span>Lost</span><span class="count health-state is-bad">1</span>' in body
    assert '<span>Queuing</span><span class="count">1</span>' in body
    assert reverse("ops:healthz") in body and 'hx-trigger="every 10s"' in body


def test_it_names_the_nodes_being_drained(admin_client, busy, fake_health):
    fake_health(_snapshot())
    Node.objects.filter(name="gpu-node-3").update(status=Node.Status.DRAINING)
    body = admin_client.get(reverse("ops:health")).content.decode()
    assert '<span>Draining</span><span class="count health-state is-bad">1</span>' in body
    assert "Being drained: gpu-node-3. Their jobs are being moved off" in body
    body = admin_client.get(reverse("ops:health"), headers={"accept_language": "zh-CN"})
    assert "排空中：gpu-node-3。" in body.content.decode()


def test_it_shows_a_stale_beat_and_a_down_broker(admin_client, db, fake_health):
    fake_health(
        _snapshot(
            beat_ok=False,
            beat_last_seen=None,
            workers=[],
            broker_ok=False,
            broker_error="ConnectionError: refused",
        )
    )
    body = admin_client.get(reverse("ops:health")).content.decode()
    assert "Never seen" in body and "Broker unreachable" in body
    assert "ConnectionError: refused" in body


def test_it_shows_health_only_to_staff(alice_client, admin_client, db, fake_health, settings):
    fake_health(_snapshot())
    refused = alice_client.get(reverse("ops:health"))
    assert refused.status_code == 403
    assert "The health page is for platform staff." in refused.content.decode()
    body = admin_client.get(reverse("ops:health")).content.decode()
    assert f'href="{reverse("admin:index")}"' in body
    assert f'href="{settings.FLOWER_URL}"' in body


def test_it_serves_the_health_panel_as_a_fragment(admin_client, db, fake_health):
    fake_health(_snapshot())
    response = admin_client.get(reverse("ops:health"), headers={"HX-Request": "true"})
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="health-panel"')
    assert "<html" not in body


def test_it_shows_the_placement_rule_and_what_fgd_keeps_room_for(
    admin_client, busy, fake_health, settings
):
    fake_health(_snapshot())

    def card() -> str:
        body = admin_client.get(reverse("ops:health")).content.decode()
        return body[body.index('id="placement"') :].split("</section>")[0]

    assert "Best fit" in card() and "SCHEDULER_PLACEMENT=best_fit" in card()
    settings.SCHEDULER_PLACEMENT, settings.SCHEDULER_WORKLOAD_HOURS = "fgd", 24
    shown = card()
    assert "FGD" in shown and "the pods submitted in the last 24 h" in shown
    # five pods of 2 GPUs and two of 1 GPU (8 vCPU each), finished or not, most common first
    rows = [
        '<li><span>2 GPU · 8 vCPU</span><span class="count">71%</span></li>',
        '<li><span>1 GPU · 8 vCPU</span><span class="count">29%</span></li>',
    ]
    assert rows[0] in shown and shown.index(rows[0]) < shown.index(rows[1])
    Job.objects.update(submitted_at=timezone.now() - timedelta(hours=25))
    assert "No quota job in that time" in card()


def test_it_reads_a_real_snapshot(admin_client, db):
    heartbeat_record(name="beat", now=timezone.now())
    body = admin_client.get(reverse("ops:health")).content.decode()
    assert "Running" in body and "Broker reachable" in body


# --- /healthz -----------------------------------------------------------------------------


def test_it_answers_healthz_without_a_login(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["checks"] == {"database": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_it_answers_503_when_the_database_does_not(client, db, monkeypatch):
    class Down:
        def cursor(self):
            raise OperationalError("could not connect")

    monkeypatch.setattr("apps.ops.views.connection", Down())
    response = client.get(reverse("ops:healthz"))
    assert response.status_code == 503
    assert response.json() == {
        "status": "error",
        "checks": {"database": "unreachable (OperationalError)"},
    }


def test_the_health_page_in_chinese_names_states_sandbox_and_agents_in_its_words(
    admin_client, busy, fake_health, monkeypatch
):
    """Node and job states, the sandbox's description and an agent's line were English."""
    fake_health(_snapshot())
    whole = Isolation(
        requested="strict",
        missing=(),
        bwrap="/usr/bin/bwrap",
        root=True,
        netns=True,
        cgroups=1,
        seccomp=True,
    )
    monkeypatch.setattr("apps.ops.views.isolation_status", lambda requested: whole)
    Node.objects.filter(name="gpu-node-3").update(status=Node.Status.LOST)
    agent_heartbeat(
        worker="agent@host-1",
        hostname="host-1",
        address="10.0.0.5",
        nodes=["gpu-node-0", "gpu-node-1"],
        public=True,
        sandbox="strict",
        now=timezone.now(),
    )
    body = admin_client.get(reverse("ops:health"), headers={"accept_language": "zh-CN"})
    body = body.content.decode()
    assert '<span title="Ready">就绪</span><span class="count">4</span>' in body
    assert '<span title="Lost">失联</span><span class="count health-state is-bad">1</span>' in body
    assert '<span>排队中</span><span class="count">1</span>' in body
    assert "已隔离：bubblewrap（/usr/bin/bwrap），独立 uid" in body and "isolated" not in body
    assert "host-1（10.0.0.5）：2 个节点及公共资源池；沙箱 strict" in body
    assert "node(s)" not in body and "Ready<" not in body and "Queuing<" not in body
