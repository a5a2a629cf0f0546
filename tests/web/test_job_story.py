"""The job page tells a job's whole story: a borrower preempted by its lender, its restarts,
lost work, checkpoints and wait; a spot job's bid and cost; each pod's log; and the health
panel's sandbox and agents. Built with the real services (pods run "none": placed = running).
"""

from __future__ import annotations

import html
import random
import re
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from apps.agent.models import NodeAgent
from apps.agent.runner import Isolation
from apps.agent.services import checkpoint_report
from apps.billing.services import billing_accrue
from apps.cluster.models import Node
from apps.core.services import heartbeat_record
from apps.jobs.models import Job, JobEvent, JobStatus, Pod, PodStatus
from apps.jobs.services import job_admit, job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.market.services import market_step
from apps.scheduler.services import scheduler_tick

pytestmark = pytest.mark.django_db(transaction=True)

CKPT_STEP = 1200


@pytest.fixture(autouse=True)
def _fast_scheduler(settings):
    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0


def submit(
    personas,
    *,
    ws="ws_a",
    user="alice",
    quota="team-a",
    pods=1,
    gpu=1,
    idle="off",
    aimaster=False,
    name="job",
    ckpt=False,
) -> Job:
    spec = JobSpec(
        display_name=name,
        user_command="python train.py",
        quota=quota,
        idle_mode=idle,
        enable_aimaster=aimaster,
        enable_easyckpt=ckpt,
        roles=[RoleSpec(pod_count=pods, cpu=4000, memory=16384, gpu=gpu)],
    )
    job = job_submit(workspace=personas[ws], user=personas[user], spec=spec)
    job.refresh_from_db()
    return job


def text(response) -> str:
    """The page as a reader sees it: tags dropped, entities decoded, spaces collapsed."""
    body = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html.unescape(body))


def section(response, element_id: str) -> str:
    """The HTML from the element with `element_id` to the end of its <section>/<div>."""
    content = response.content.decode()
    start = content.index(f'id="{element_id}"')
    tag = content.rfind("<", 0, start)
    name = re.match(r"<(\w+)", content[tag:])[1]
    depth, pos = 0, tag
    for match in re.finditer(rf"<(/?){name}\b", content[tag:]):
        depth += -1 if match[1] else 1
        if depth == 0:
            pos = content.index(">", tag + match.end()) + 1
            break
    return content[tag:pos]


def reclaimed(personas, *, aimaster: bool, checkpoint_at: datetime | None = None) -> dict[str, Job]:
    """charlie's only-idle borrower (EasyCkpt) fills the 4×4-GPU pool for 30 min,
    checkpoints at step 1200 10 min in (or at `checkpoint_at`); then alice's regular team-a
    job reclaims 4 GPUs."""
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=aimaster,
        ckpt=True,
        name="borrower",
    )
    assert borrower.status == JobStatus.RUNNING
    started = timezone.now() - timedelta(minutes=30)
    borrower.pods.update(started_at=started)
    checkpoint_report(
        job_pk=borrower.pk,
        step=CKPT_STEP,
        path="/ckpt/step-1200",
        size_bytes=3 * 1024**2,
        at=checkpoint_at or started + timedelta(minutes=10),
    )
    owner = submit(personas, pods=1, gpu=4, name="owner")
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))  # places the owner
    borrower.refresh_from_db()
    owner.refresh_from_db()
    assert owner.status == JobStatus.RUNNING
    return {"borrower": borrower, "owner": owner}


@pytest.fixture
def story(personas):
    """The borrower with AIMaster: the reclaim requeues it."""
    jobs = reclaimed(personas, aimaster=True)
    assert jobs["borrower"].status == JobStatus.QUEUING
    return jobs


@pytest.fixture
def charlie_client(client, personas):
    client.force_login(personas["charlie"])
    return client


def detail(client, job: Job, **headers):
    return client.get(reverse("jobs:detail", args=[job.job_id]), headers=headers)


# --- the preempted borrower ------------------------------------------------------------------


def test_it_shows_the_preempted_pods_with_the_preemptor_and_quota(charlie_client, story):
    response = detail(charlie_client, story["borrower"])
    assert response.status_code == 200
    history = section(response, "history-pods")
    assert history.count('class="badge badge-warning">Preempted</span>') == 4
    owner = story["owner"]
    assert (
        f"preempted by job {owner.display_name} ({owner.job_id}) of quota team-a, which "
        "reclaims its guaranteed resources"
    ) in history
    assert history.count('<span class="tag tag-out">Not in Quota</span>') == 4
    assert "4 from earlier attempts" in history
    attempt = text_of(section(response, "attempt-0"))
    assert re.search(
        r"Attempt 0 · 4 pods · replaced [\d-]+ [\d:]+ after its resources were taken back, "
        r"not counted, \( JobPreempted \), 5\.33 GPU-hours lost",
        attempt,
    ), attempt
    # The shared end is said once above the pods, not on each row.
    assert history.count("preempted by job owner") == 1


def test_it_shows_the_restart_with_its_cause_and_lost_work(charlie_client, story):
    response = detail(charlie_client, story["borrower"])
    restarts = section(response, "restarts")
    assert ">not counted</span>" in restarts and "JobPreempted" in restarts
    assert "A preemption or a reclaim: it used none of AIMaster's restarts" in restarts
    assert "platform interruption" not in html.unescape(restarts).lower()
    # 16 GPUs for the 20 minutes since the checkpoint: 5.33 GPU-hours.
    lost = story["borrower"].restarts.get().lost_gpu_seconds
    assert lost == pytest.approx(16 * 20 * 60, rel=0.01)
    assert f"{lost / 3600:.2f} GPU-hours" in restarts
    page = text(response)
    assert "AIMaster restarts 0/3" in page  # a preemption spends none
    assert f"Work lost {lost / 3600:.2f} GPU-hours over 1 interruption" in page
    assert f"Latest checkpoint step {CKPT_STEP}" in page


def test_a_checkpoint_saved_on_the_way_out_leaves_no_stale_work_lost_on_the_page(
    charlie_client, story
):
    """The borrower's pods saved on SIGTERM, so the restart's work lost is revised to none;
    the preemption's reason, on the restart, the pods and the job, said the 19,200
    GPU-seconds first counted, beside the 0.00 GPU-hours of the same row."""
    borrower = story["borrower"]
    restart = borrower.restarts.get()
    checkpoint_report(
        job_pk=borrower.pk,
        step=CKPT_STEP + 100,
        path="/ckpt/step-1300",
        size_bytes=1,
        at=restart.at + timedelta(seconds=1),
    )
    response = detail(charlie_client, borrower)
    for where in ("restarts", "attempt-0", "status-history"):
        shown = text_of(section(response, where))
        assert "19,20" not in shown and "5.33" not in shown, (where, shown)
    assert "0.00 GPU-hours 0 GPU·s preempted by job owner" in text_of(section(response, "restarts"))
    assert "0.00 GPU-hours lost" in text_of(section(response, "attempt-0"))
    events = text_of(section(response, "events"))
    assert "the work lost at interruption 1 is 0 GPU-seconds, not 19,20" in events
    borrower.refresh_from_db()
    assert "19,20" not in borrower.reason_message  # what GetJob says while it queues


def test_a_borrower_a_preemption_ended_counts_the_work_that_preemption_lost(
    charlie_client, personas
):
    # No AIMaster: the preemption fails the job, and what it lost is the job's lost work.
    borrower = reclaimed(personas, aimaster=False)["borrower"]
    assert borrower.status == JobStatus.FAILED and borrower.reason_code == "JobPreempted"
    assert not borrower.restarts.exists()
    # 16 GPUs for the 20 minutes since the checkpoint
    assert borrower.ended_lost_gpu_seconds == pytest.approx(16 * 20 * 60, rel=0.01)
    page = text(detail(charlie_client, borrower))
    hours = borrower.ended_lost_gpu_seconds / 3600
    assert f"Work lost {hours:.2f} GPU-hours over 1 interruption" in page
    # its Failed event says what it lost, as a requeue's Requeued event does
    failed = borrower.events.get(kind="Failed").message
    assert failed.endswith(f"(no automatic fault tolerance); lost {hours:.2f} GPU-hours")


def test_a_little_lost_work_is_not_shown_as_none(charlie_client, personas):
    # The borrower checkpointed just before the reclaim: 16 GPUs for about half a second, some
    # 10 GPU-seconds; the page and the events said "0.00 GPU-hours", as if nothing had been
    # lost.
    borrower = reclaimed(
        personas, aimaster=True, checkpoint_at=timezone.now() - timedelta(seconds=0.5)
    )["borrower"]
    lost = borrower.restarts.get().lost_gpu_seconds
    assert 3.6 < lost < 18  # 0.001 to 0.005 GPU-hours: four places
    hours = f"{lost / 3600:.4f}"
    response = detail(charlie_client, borrower)
    assert f"{lost:,.0f} GPU·s" in section(response, "restarts")
    assert text_of(section(response, "work-lost")).startswith(f"{hours} GPU-hours")
    assert f"{hours} GPU-hours" in section(response, "restarts")
    assert f"back to the queue; lost {hours} GPU-hours" in section(response, "events")
    assert "0.00 GPU-hours" not in text(response)


def test_a_job_no_interruption_ended_has_lost_nothing(charlie_client, personas):
    job = submit(personas, ws="ws_b", user="charlie", quota="team-b", pods=1, gpu=1, name="ok")
    assert job.ended_lost_gpu_seconds is None
    lost = text_of(section(detail(charlie_client, job), "work-lost"))
    assert lost.strip() == "0.00 GPU-hours"  # and no "over N interruptions"


def test_it_shows_the_requeued_and_preempted_events(charlie_client, story):
    events = section(detail(charlie_client, story["borrower"]), "events")
    assert 'class="event-requeued"' in events and 'class="event-preempted"' in events
    assert (
        "(its resources were taken back: AIMaster's budget 0/3 is not used); back to the queue; "
        "lost 5.33 GPU-hours"
    ) in html.unescape(events)


def test_it_says_why_the_borrower_waits_and_where_it_stands(charlie_client, story):
    borrower = story["borrower"]
    assert borrower.pending_reason and borrower.queue_position
    pending = html.unescape(section(detail(charlie_client, borrower), "pending"))
    assert borrower.pending_reason in pending
    assert f"position {borrower.queue_position} of {borrower.queue_size}" in pending
    assert "Requeued by AIMaster after its resources were taken back" in pending
    assert "JobPreempted" in pending
    assert f"resumes from the checkpoint at step {CKPT_STEP}" in pending


def test_it_shows_the_resume_from_the_checkpoint_once_it_runs_again(
    charlie_client, story, personas
):
    job_stop(job=story["owner"], by=personas["alice"])
    borrower = story["borrower"]
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.RUNNING
    response = detail(charlie_client, borrower)
    assert 'id="pending"' not in response.content.decode()
    assert f"Resumed Resuming from checkpoint at step {CKPT_STEP}" in text(response)
    assert f"Resuming from checkpoint at step {CKPT_STEP}" in section(response, "events")
    pods, history = section(response, "pods"), section(response, "history-pods")
    assert pods.count('class="badge badge-running">Running</span>') == 4
    assert "Preempted" not in pods
    assert history.count('class="badge badge-warning">Preempted</span>') == 4


def test_it_links_every_pod_to_its_logs(charlie_client, story):
    content = detail(charlie_client, story["borrower"]).content.decode()
    for pod in Pod.objects.filter(job=story["borrower"]):
        assert f'href="{reverse("pods:logs", args=[pod.pod_id])}"' in content
        assert f'href="{reverse("pods:logs-download", args=[pod.pod_id])}" download' in content


def test_it_shows_the_lender_in_quota_on_its_node(alice_client, story):
    response = detail(alice_client, story["owner"])
    pods = section(response, "pods")
    assert '<span class="tag tag-in">In Quota</span>' in pods
    assert re.search(r">gpu-node-\d<", pods) and "4 GPU" in pods
    assert 'id="history-pods"' not in response.content.decode()
    assert "No restarts" in text(response)


def test_it_shows_usage_only_for_a_prepaid_quota_job(charlie_client, story):
    cost = text_of(section(detail(charlie_client, story["borrower"]), "job-cost"))
    assert "Usage" in cost and "PrePaid (resource quota)" in cost
    assert "GPU-hours 8.00" in cost  # 16 GPUs for 30 minutes
    assert "Cost so far" not in cost


def test_it_hides_the_story_from_another_workspace(alice_client, story):
    assert detail(alice_client, story["borrower"]).status_code == 404


def test_it_serves_the_story_in_the_live_fragment(charlie_client, story):
    response = detail(
        charlie_client, story["borrower"], **{"HX-Request": "true", "HX-Target": "job-live"}
    )
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith('<div id="job-live"')
    for element in ('id="pending"', 'id="history-pods"', 'id="restarts"', 'id="job-cost"'):
        assert element in body, element
    assert 'id="configuration"' not in body and "<html" not in body


def test_it_reads_the_story_in_a_fixed_number_of_queries(
    charlie_client, story, personas, django_assert_max_num_queries
):
    borrower = story["borrower"]
    url = reverse("jobs:detail", args=[borrower.job_id])
    with CaptureQueriesContext(connection) as before:
        charlie_client.get(url)
    # Two more preemptions' worth of history: pods, restarts, events, checkpoints.
    role = borrower.roles.get()
    now = timezone.now()
    for attempt in range(2, 4):
        for i in range(4):
            Pod.objects.create(
                job=borrower,
                role=role,
                index=i,
                attempt=attempt - 1,
                pod_id=f"{borrower.job_id}-extra-{attempt}-{i}",
                node=Node.objects.get(name=f"gpu-node-{i}"),
                in_quota=False,
                status=PodStatus.PREEMPTED,
                started_at=now,
                finished_at=now,
            )
        JobEvent.objects.create(
            job=borrower, pod=borrower.pods.first(), kind="Preempted", message="again", at=now
        )
        borrower.restarts.create(
            number=attempt, at=now, cause="JobPreempted", message="again", lost_gpu_seconds=60
        )
        checkpoint_report(job_pk=borrower.pk, step=attempt * 1000, path="", size_bytes=1, at=now)
    with django_assert_max_num_queries(len(before.captured_queries)):
        response = charlie_client.get(url)
    assert response.status_code == 200
    with django_assert_max_num_queries(16):
        detail(charlie_client, borrower, **{"HX-Request": "true", "HX-Target": "job-live"})


# --- a spot job ------------------------------------------------------------------------------


@pytest.fixture
def spot_job(personas):
    """alice's spot job, SpotDiscountLimit 0.5 on ecs.g7.xlarge (¥0.40/h), started by a
    market step and billed for its first minutes."""
    spec = JobSpec(
        display_name="spot-train",
        user_command="python train.py",
        resource_source="spot",
        enable_aimaster=True,
        roles=[
            RoleSpec(pod_count=2, instance_type="ecs.g7.xlarge", spot_discount_limit=Decimal("0.5"))
        ],
    )
    job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)
    now = timezone.now()
    job_admit(job_pk=job.pk, now=now)
    market_step(now=now, rng=random.Random(7))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING
    billing_accrue(now=now + timedelta(minutes=3))
    return job


def test_it_shows_a_spot_jobs_bid_against_the_market(alice_client, spot_job):
    response = detail(alice_client, spot_job)
    bids = html.unescape(section(response, "spot-bids"))
    assert "Spot bids and market price" in bids
    assert "¥0.4000/h" in bids  # 0.5 × ¥0.80/h
    assert 'data-price-chart="bid-chart-ecsg7xlarge"' in bids and "Worker bid" in bids
    assert 'hx-trigger="every ' in bids  # it follows the market on its own
    assert "js/market-chart.js" in response.content.decode()


def test_it_shows_a_spot_jobs_cost_so_far(alice_client, spot_job):
    response = detail(alice_client, spot_job)
    cost = text_of(section(response, "job-cost"))
    assert "Cost so far ¥" in cost and "acs:pai:dlc:payType=spot" in cost
    assert "Billed instance-minutes 0" not in cost
    pods = section(response, "pods")
    assert pods.count("public pool") == 2 and "Not in Quota" not in pods


def test_it_keeps_the_spot_chart_across_live_swaps(alice_client, spot_job):
    live = detail(alice_client, spot_job, **{"HX-Request": "true", "HX-Target": "job-live"})
    body = live.content.decode()
    assert '<div id="spot-bids" hx-preserve="true"></div>' in body
    assert "Spot bids and market price" not in body  # not recomputed every 3 s
    chart = detail(alice_client, spot_job, **{"HX-Request": "true", "HX-Target": "spot-bids"})
    body = chart.content.decode()
    assert chart.status_code == 200 and body.lstrip().startswith('<div id="spot-bids"')
    assert "hx-preserve" not in body and "Spot bids and market price" in body


def test_it_stops_polling_the_spot_chart_once_the_job_ended(alice_client, personas, spot_job):
    job_stop(job=spot_job, by=personas["alice"])
    chart = detail(alice_client, spot_job, **{"HX-Request": "true", "HX-Target": "spot-bids"})
    assert chart.status_code == 286 and "hx-trigger" not in chart.content.decode()


# --- the jobs list -------------------------------------------------------------------------


def test_it_hints_why_a_job_waits_in_the_list(charlie_client, story):
    response = charlie_client.get(reverse("jobs:list"))
    borrower = story["borrower"]
    hint = re.search(
        r'<div class="sub pending-hint" title="([^"]*)">([^<]*)</div>', response.content.decode()
    )
    assert hint, "no pending hint"
    assert html.unescape(hint[1]).startswith(borrower.pending_reason)
    assert len(html.unescape(hint[2])) <= 48


def test_it_gives_no_hint_for_a_running_job(alice_client, story):
    assert "pending-hint" not in alice_client.get(reverse("jobs:list")).content.decode()


# --- the health panel --------------------------------------------------------------------------


@pytest.fixture
def quiet_broker(monkeypatch):
    from apps.core.selectors import Health

    monkeypatch.setattr(
        "apps.ops.views.health_snapshot",
        lambda **kw: Health(
            beat_last_seen=None, beat_ok=False, workers=[], broker_ok=True, broker_error=""
        ),
    )


def _isolation(requested: str, missing: tuple[str, ...] = ()) -> Isolation:
    return Isolation(
        requested=requested,
        missing=missing,
        bwrap="/usr/bin/bwrap",
        root=True,
        netns=True,
        cgroups=1,
        seccomp=True,
    )


def test_it_shows_the_pod_sandbox(admin_client, cluster, quiet_broker, monkeypatch):
    monkeypatch.setattr("apps.ops.views.isolation_status", lambda requested: _isolation(requested))
    response = admin_client.get(reverse("ops:health"))
    sandbox = text_of(section(response, "sandbox"))
    assert "Pod sandbox Isolated (strict) Isolated: bubblewrap (/usr/bin/bwrap), own uid" in sandbox
    assert "(this host, SANDBOX=strict )" in sandbox
    assert 'id="sandbox-alert"' not in response.content.decode()


def test_it_says_in_red_that_a_strict_host_refuses_pods(
    admin_client, cluster, quiet_broker, monkeypatch
):
    monkeypatch.setattr(
        "apps.ops.views.isolation_status",
        lambda requested: _isolation("strict", ("bubblewrap is not installed",)),
    )
    content = admin_client.get(reverse("ops:health")).content.decode()
    assert 'class="alert alert-error health-wide" role="alert" id="sandbox-alert"' in content
    assert "This host refuses to run pods" in content
    assert "What is missing: bubblewrap is not installed." in content
    assert '<p class="health-state is-bad">Refusing pods (strict)</p>' in content


def test_it_says_in_red_that_pods_run_insecurely(admin_client, cluster, quiet_broker, monkeypatch):
    monkeypatch.setattr(
        "apps.ops.views.isolation_status",
        lambda requested: _isolation("insecure", ("the agent does not run as root",)),
    )
    content = admin_client.get(reverse("ops:health")).content.decode()
    assert 'class="alert alert-error health-wide"' in content
    assert "Pods run INSECURELY on this host" in content
    assert '<p class="health-state is-bad">Insecure (SANDBOX=insecure)</p>' in content


def test_it_says_in_red_what_work_waits_too_long(admin_client, personas, cluster, quiet_broker):
    from apps.agent.models import PodProcess

    assert "Nothing behind" in text_of(section(admin_client.get(reverse("ops:health")), "backlog"))
    job = submit(personas, pods=2)
    long_ago = timezone.now() - timedelta(minutes=5)
    first, second = job.pods.order_by("index")
    for pod, state in ((first, "queued"), (second, "starting")):
        PodProcess.objects.create(
            pod=pod, state=state, queue=f"node.{pod.node.name}", queued_at=long_ago
        )
    Job.objects.filter(pk=submit(personas, name="stuck").pk).update(
        status=JobStatus.CREATING, submitted_at=long_ago
    )
    backlog = text_of(section(admin_client.get(reverse("ops:health")), "backlog"))
    assert "Nothing behind" not in backlog
    assert "Pod starts waiting for an agent: 1 Waiting since" in backlog
    assert f"on node.{first.node.name} (1) (more than 60 s)" in backlog
    assert "Pods claimed but not started: 1" in backlog
    assert "Jobs not yet admitted (Creating): 1" in backlog


def test_it_says_in_red_which_agents_run_pods_insecurely(admin_client, cluster, quiet_broker):
    now = timezone.now()
    for worker, mode, node in (("agent@a", "strict", 0), ("agent@b", "insecure", 1)):
        NodeAgent.objects.create(
            node=cluster["nodes"][node],
            worker=worker,
            hostname="h",
            address="10.0.0.5",
            sandbox=mode,
            last_seen=now,
        )
    content = admin_client.get(reverse("ops:health")).content.decode()
    assert "<strong>Pods run INSECURELY</strong> under agent@b (" in content
    NodeAgent.objects.filter(worker="agent@b").update(sandbox="strict")
    assert 'id="sandbox-alert"' not in admin_client.get(reverse("ops:health")).content.decode()


def test_it_lists_node_agents_and_their_heartbeats(admin_client, cluster, quiet_broker, clock):
    now = clock.now
    for i, node in enumerate(cluster["nodes"][:2]):
        NodeAgent.objects.create(
            node=node,
            worker="agent@host-1",
            hostname="host-1",
            address="10.0.0.5",
            sandbox="strict",
            last_seen=now - timedelta(seconds=3 + 100 * i),
        )
    heartbeat_record(
        name="agent:agent@host-1",
        now=now - timedelta(seconds=3),
        detail="host-1 (10.0.0.5): 2 nodes; sandbox strict",
    )
    heartbeat_record(name="beat", now=now)
    response = admin_client.get(reverse("ops:health"))
    agents = section(response, "agents")
    page = text_of(agents)
    assert "Node agents (1 agent, 2 nodes)" in page
    assert "agent@host-1 host-1 (10.0.0.5): 2 nodes; sandbox strict" in page
    assert "gpu-node-0" in agents and "gpu-node-1" in agents and "10.0.0.5" in agents
    assert '<span class="health-state is-ok">3 s ago</span>' in agents
    assert '<span class="health-state is-bad">103 s ago</span>' in agents  # silent: Lost soon
    assert "beat" not in re.findall(r'<span class="mono">([^<]*)</span>', agents)


def test_it_says_when_no_agent_has_reported(admin_client, cluster, quiet_broker):
    assert "No agent has reported yet" in text(admin_client.get(reverse("ops:health")))


def text_of(fragment: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", fragment))).strip()
