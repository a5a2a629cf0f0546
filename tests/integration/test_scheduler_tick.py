"""The live tick on the real database: admissions, waiting reasons, reclaim and AIMaster."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.jobs.models import FINISHED_STATUSES, Job, JobEvent, JobStatus, Pod, PodStatus
from apps.jobs.services import job_stop, job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.scheduler.services import scheduler_tick

pytestmark = pytest.mark.django_db(transaction=True)


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
    priority=1,
    max_restarts=3,
) -> Job:
    spec = JobSpec(
        display_name=name,
        user_command="python train.py",
        quota=quota,
        idle_mode=idle,
        enable_aimaster=aimaster,
        max_restarts=max_restarts,
        priority=priority,
        roles=[RoleSpec(pod_count=pods, cpu=4000, memory=16384, gpu=gpu)],
    )
    job = job_submit(workspace=personas[ws], user=personas[user], spec=spec)
    job.refresh_from_db()
    return job


def test_it_runs_a_regular_job_in_quota(personas):
    job = submit(personas, pods=2, gpu=2)
    assert job.status == JobStatus.RUNNING
    assert [t.status for t in job.status_history.all()] == [
        "Creating",
        "Queuing",
        "EnvPreparing",
        "Running",
    ]
    pods = list(job.pods.all())
    assert len(pods) == 2 and all(p.in_quota and p.status == PodStatus.RUNNING for p in pods)
    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds[:4] == ["Submitted", "Enqueued", "Dequeued", "Scheduled"]


def test_it_keeps_a_job_over_its_quota_waiting_with_a_reason(personas):
    submit(personas, pods=1, gpu=4, name="first")  # half of team-a's 8 GPU
    job = submit(personas, pods=2, gpu=4)  # 8 GPU: 4 free
    assert job.status == JobStatus.QUEUING
    assert "team-a" in job.pending_reason and "GPU" in job.pending_reason
    assert (job.queue_position, job.queue_size) == (1, 1)


def test_it_lets_an_acceptable_job_borrow_idle_room(personas):
    job = submit(personas, pods=3, gpu=4, idle="acceptable")
    assert job.status == JobStatus.RUNNING
    flags = sorted(job.pods.values_list("in_quota", flat=True))
    assert flags == [False, True, True]


def test_it_reclaims_from_a_borrower_and_requeues_it_with_aimaster(personas):
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=True,
        name="borrower",
    )
    assert borrower.status == JobStatus.RUNNING
    assert not any(borrower.pods.values_list("in_quota", flat=True))

    owner = submit(personas, pods=1, gpu=4, name="owner")  # team-a's own guarantee
    borrower.refresh_from_db()
    owner.refresh_from_db()
    # The submit's tick preempted the borrower; the next tick places the owner.
    assert borrower.status == JobStatus.QUEUING
    assert borrower.restart_times == 0 and borrower.attempt == 1  # a preemption spends none
    preempted = list(borrower.pods.filter(status=PodStatus.PREEMPTED))
    assert len(preempted) == 4
    assert "owner" in preempted[0].message and "team-a" in preempted[0].message
    assert borrower.restarts.get().cause == "JobPreempted"
    assert borrower.reason_code == "JobPreempted"

    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    owner.refresh_from_db()
    assert owner.status == JobStatus.RUNNING
    assert all(owner.pods.values_list("in_quota", flat=True))
    kinds = set(JobEvent.objects.filter(job=borrower).values_list("kind", flat=True))
    assert {"Preempted", "Requeued"} <= kinds


def test_it_fails_a_preempted_job_without_aimaster(personas):
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        name="fragile",
    )
    submit(personas, pods=1, gpu=4, name="owner")
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.FAILED
    assert borrower.reason_code == "JobPreempted"


def test_a_borrower_with_aimaster_preempted_again_and_again_waits_again_each_time(personas):
    # "Preempted" is never terminal for a job with fault tolerance, even with no restart left
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=True,
        max_restarts=0,
        name="borrower",
    )
    later = timezone.now()
    for n in (1, 2):
        assert borrower.status == JobStatus.RUNNING, n
        owner = submit(personas, pods=1, gpu=4, name=f"owner-{n}")
        borrower.refresh_from_db()
        assert borrower.status == JobStatus.QUEUING and borrower.reason_code == "JobPreempted"
        assert (borrower.restart_times, borrower.attempt) == (0, n)
        assert "AIMaster's budget 0/0 is not used" in borrower.reason_message
        job_stop(job=owner, by=None)
        later += timedelta(seconds=1)
        scheduler_tick(now=later)
        borrower.refresh_from_db()
    assert [r.counted for r in borrower.restarts.all()] == [False, False]


def _set_min_gpu(name: str, gpu: int) -> None:
    """An admin's change of a quota's min, as the Django admin's form saves it."""
    from django.forms.models import model_to_dict

    from apps.cluster.admin import QuotaForm
    from apps.cluster.models import Quota

    quota = Quota.objects.get(name=name)
    form = QuotaForm(data={**model_to_dict(quota), "min_gpu": gpu}, instance=quota)
    assert form.is_valid(), form.errors
    form.save()


def _full_cluster(personas) -> tuple[Job, Job]:
    """team-a and team-b each run 8 GPUs In Quota (team-a in two jobs, the second newer),
    then team-a's min goes from 8 to 4 GPUs and team-b's from 8 to 12."""
    kept = submit(personas, pods=1, gpu=4, aimaster=True, name="alice-old")
    newer = submit(personas, pods=1, gpu=4, aimaster=True, name="alice-new")
    submit(personas, ws="ws_b", user="charlie", quota="team-b", pods=2, gpu=4, name="charlie")
    assert Pod.objects.filter(in_quota=True, status=PodStatus.RUNNING).count() == 4
    _set_min_gpu("team-a", 4)
    _set_min_gpu("team-b", 12)
    return kept, newer


def test_an_owner_reclaims_what_a_quota_runs_above_its_lowered_min(personas):
    from apps.jobs.waiting import NOT_IN_QUOTA, sub_status

    kept, newer = _full_cluster(personas)
    owner = submit(personas, ws="ws_b", user="charlie", quota="team-b", gpu=4, name="bob-next")
    assert (owner.pending_reason, owner.sub_status) == (
        "borrowers being reclaimed: 1 job",
        "WaitingForReclaim",
    )
    newer.refresh_from_db()
    assert newer.status == JobStatus.QUEUING and newer.reason_code == "JobPreempted"
    (pod,) = newer.pods.all()
    assert pod.status == PodStatus.PREEMPTED and pod.in_quota is False
    assert "bob-next" in pod.message and "team-b" in pod.message
    kinds = list(newer.events.values_list("kind", flat=True))
    assert kinds.index("OnLoan") < kinds.index("Preempted")
    assert newer.events.get(kind="OnLoan").message == (
        "1 pod now runs Not in Quota: the min of quota team-a was lowered below what its"
        " jobs use, and an owner short of its own may reclaim it"
    )

    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    owner.refresh_from_db()
    newer.refresh_from_db()
    assert owner.status == JobStatus.RUNNING
    assert all(owner.pods.values_list("in_quota", flat=True))
    assert newer.status == JobStatus.QUEUING
    assert newer.pending_reason == "quota team-a: needs 4 GPU, 0 free"
    # the job that team-a's new min holds runs on, In Quota
    kept.refresh_from_db()
    assert kept.status == JobStatus.RUNNING and sub_status(kept) != NOT_IN_QUOTA
    assert all(kept.pods.values_list("in_quota", flat=True))
    assert not kept.events.filter(kind__in=("OnLoan", "Preempted")).exists()


def test_an_owner_short_of_its_min_says_it_waits_for_young_jobs_on_loan(personas, settings):
    kept, newer = _full_cluster(personas)
    settings.SCHEDULER_MIN_RUN_SECONDS = 3600
    owner = submit(personas, ws="ws_b", user="charlie", quota="team-b", gpu=4, name="bob-next")
    assert owner.status == JobStatus.QUEUING
    assert owner.pending_reason == (
        "borrowers to reclaim have run less than the minimum 3600 s: 1 job"
    )
    assert not Pod.objects.filter(status=PodStatus.PREEMPTED).exists()
    newer.refresh_from_db()
    assert newer.status == JobStatus.RUNNING
    assert list(newer.pods.values_list("in_quota", flat=True)) == [False]


def test_a_lowered_min_stops_nothing_while_no_owner_needs_the_room(personas, client):
    from django.urls import reverse

    from apps.jobs.waiting import NOT_IN_QUOTA, sub_status

    kept, newer = _full_cluster(personas)
    waits = submit(personas, gpu=1, name="alice-more")  # team-a's own: its min is used
    assert waits.status == JobStatus.QUEUING
    assert waits.pending_reason == "quota team-a: needs 1 GPU, 0 free"
    newer.refresh_from_db()
    assert newer.status == JobStatus.RUNNING and sub_status(newer) == NOT_IN_QUOTA
    assert not Pod.objects.filter(status=PodStatus.PREEMPTED).exists()
    assert list(newer.events.filter(kind="OnLoan").values_list("message", flat=True)) == [
        "1 pod now runs Not in Quota: the min of quota team-a was lowered below what its"
        " jobs use, and an owner short of its own may reclaim it"
    ]
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))  # once only
    assert newer.events.filter(kind="OnLoan").count() == 1
    client.force_login(personas["alice"])
    page = client.get(reverse("jobs:detail", args=[newer.job_id])).content.decode()
    assert '<span class="tag tag-out">Not in Quota</span>' in page
    assert "the min of quota team-a was lowered below what its jobs use" in page


def test_it_changes_nothing_on_a_repeated_tick(personas):
    submit(personas, pods=2, gpu=2)
    submit(personas, pods=2, gpu=4, name="waits")
    before = (
        Pod.objects.count(),
        JobEvent.objects.count(),
        list(Job.objects.values_list("status", "pending_reason", "queue_position")),
    )
    scheduler_tick(now=timezone.now())
    scheduler_tick(now=timezone.now())
    after = (
        Pod.objects.count(),
        JobEvent.objects.count(),
        list(Job.objects.values_list("status", "pending_reason", "queue_position")),
    )
    assert before == after


def test_it_admits_the_next_job_when_a_running_job_stops(personas):
    first = submit(personas, pods=2, gpu=4, name="first")
    second = submit(personas, pods=1, gpu=4, name="second")
    assert second.status == JobStatus.QUEUING
    job_stop(job=first, by=personas["alice"])
    second.refresh_from_db()
    assert second.status == JobStatus.RUNNING


def test_it_waits_for_preempted_processes_to_exit_before_placing_the_owner(personas):
    from apps.agent.models import PodProcess

    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=True,
        name="borrower",
    )
    now = timezone.now()
    PodProcess.objects.bulk_create(
        PodProcess(pod=pod, state="running", queue=f"node.{pod.node.name}", queued_at=now)
        for pod in borrower.pods.all()
    )
    owner = submit(personas, pods=1, gpu=4, name="owner")
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    owner.refresh_from_db()
    assert owner.status == JobStatus.QUEUING  # the borrower's processes still hold the GPUs
    assert "freed" in owner.pending_reason

    PodProcess.objects.update(state="exited", exit_code=143)
    scheduler_tick(now=timezone.now() + timedelta(seconds=2))
    owner.refresh_from_db()
    assert owner.status == JobStatus.RUNNING


def test_a_preempted_job_starts_again_only_after_its_old_pods_exit(personas):
    """Its rank 0 may still be saving on SIGTERM into the checkpoint directory the next
    attempt would read: the next attempt waits for it, though room is free elsewhere."""
    from apps.agent.models import PodProcess

    fillers = [
        submit(personas, ws="ws_b", user="charlie", quota="team-b", gpu=4, idle="only_idle")
        for _ in range(3)
    ]
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        gpu=4,
        idle="only_idle",
        aimaster=True,
        name="newest",  # the least work to lose: the owner's victim
    )
    PodProcess.objects.create(
        pod=borrower.pods.get(),
        state="running",
        queue="node.n",
        queued_at=timezone.now(),
    )
    owner = submit(personas, gpu=4, name="owner")
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.QUEUING and borrower.attempt == 1
    for filler in fillers[:2]:  # two nodes free up: one for the owner, one the borrower fits
        job_stop(job=filler, by=personas["charlie"])
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    owner.refresh_from_db()
    borrower.refresh_from_db()
    assert owner.status == JobStatus.RUNNING
    assert borrower.status == JobStatus.QUEUING
    assert borrower.pending_reason == (
        "waiting for 1 pod of its previous attempt to exit (grace period)"
    )
    assert not borrower.pods.filter(attempt=1).exists()

    PodProcess.objects.update(state="exited", exit_code=143)
    scheduler_tick(now=timezone.now() + timedelta(seconds=2))
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.RUNNING
    assert borrower.pods.filter(attempt=1).count() == 1


def _preemption_wave(personas, *, victims: int) -> tuple[list[dict], int]:
    """Fill all 16 GPUs with 1-GPU borrowers of team-b, then let one team-a owner of
    `victims` 1-GPU pods reclaim in a tick of its own. Returns each victim's rows (as
    `_victim_rows`) and the number of queries that tick made; leaves every job stopped."""
    borrowers = [
        submit(
            personas,
            ws="ws_b",
            user="charlie",
            quota="team-b",
            gpu=1,
            idle="only_idle",
            aimaster=True,
            name=f"borrower-{i}",
        )
        for i in range(16)
    ]
    assert {b.status for b in borrowers} == {JobStatus.RUNNING}
    now = timezone.now() + timedelta(seconds=10)
    # The same work lost by every borrower: their reasons and messages read alike.
    Pod.objects.filter(job__in=borrowers).update(started_at=now - timedelta(seconds=100))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("apps.jobs.services._tick_soon", lambda: None)
        owner = submit(personas, pods=victims, gpu=1, name="owner")
        assert owner.status == JobStatus.QUEUING
        with CaptureQueriesContext(connection) as queries:
            report = scheduler_tick(now=now)
        assert report.preempted == victims
        preempted = [b for b in borrowers if b.pods.filter(status=PodStatus.PREEMPTED).exists()]
        rows = [_victim_rows(b, owner=owner, now=now) for b in preempted]
        for job in Job.objects.exclude(status__in=FINISHED_STATUSES):
            job_stop(job=job, by=None, now=now + timedelta(seconds=1))
    return rows, len(queries)


def _victim_rows(job: Job, *, owner: Job, now) -> dict:
    """What a preempting tick at `now` wrote for `job`, without its ids and with times
    relative to `now`."""
    job.refresh_from_db()

    def plain(text: str) -> str:
        return text.replace(job.job_id, "<job>").replace(owner.job_id, "<owner>")

    def since(moment):
        return None if moment is None else (moment - now).total_seconds()

    return {
        "job": (
            job.status,
            job.reason_code,
            plain(job.reason_message),
            job.attempt,
            job.restart_times,
            since(job.not_before),
            since(job.status_changed_at),
        ),
        "pods": [
            (plain(p.pod_id), p.attempt, p.status, p.reason, plain(p.message))
            + (p.in_quota, since(p.started_at), since(p.finished_at))
            for p in job.pods.all()
        ],
        "events": [
            (e.kind, plain(e.message), e.pod_id is not None)  # ids differ between victims
            for e in job.events.filter(at=now).order_by("id")
        ],
        "restarts": [
            (r.number, since(r.at), r.cause, plain(r.message), r.lost_gpu_seconds, r.counted)
            for r in job.restarts.all()
        ],
        "history": [
            (t.status, t.reason_code, plain(t.reason_message), t.started_at == now)
            + (since(t.ended_at),)
            for t in job.status_history.all()
            if now in (t.started_at, t.ended_at)
        ],
    }


def test_it_preempts_many_victims_as_one_alone_in_a_fixed_number_of_queries(personas):
    (alone,), _ = _preemption_wave(personas, victims=1)
    assert [kind for kind, *_ in alone["events"]] == ["Preempted", "PodPreempted", "Requeued"]
    assert alone["pods"][0][2:4] == (PodStatus.PREEMPTED, "Preempted")
    assert alone["job"][:2] == (JobStatus.QUEUING, "JobPreempted")
    two, two_queries = _preemption_wave(personas, victims=2)
    six, six_queries = _preemption_wave(personas, victims=6)
    assert len(two) == 2 and len(six) == 6
    for rows in two + six:
        assert rows == alone
    assert six_queries == two_queries


def test_a_requeued_job_is_said_to_resume_from_the_checkpoint_it_can_load(personas):
    """EasyCkpt's next attempt loads the highest step whose file is left: not a newer step
    whose file is gone, nor an older one whose recorded time is ahead of the clock."""
    borrower = submit(
        personas,
        ws="ws_b",
        user="charlie",
        quota="team-b",
        pods=4,
        gpu=4,
        idle="only_idle",
        aimaster=True,
        name="borrower",
    )
    now = timezone.now()
    for step, at, removed in [
        (20, now - timedelta(seconds=20), None),
        (30, now - timedelta(seconds=10), now),  # its file is gone
        (10, now + timedelta(hours=1), None),  # a clock ahead stamped it
    ]:
        borrower.checkpoints.create(
            step=step, path=f"/ckpt/ckpt-{step:012d}.pkl", created_at=at, removed_at=removed
        )
    owner = submit(personas, pods=1, gpu=4, name="owner")
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.QUEUING and borrower.attempt == 1
    job_stop(job=owner, by=personas["alice"], now=timezone.now())

    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    borrower.refresh_from_db()
    assert borrower.status == JobStatus.RUNNING
    assert list(borrower.events.filter(kind="Resumed").values_list("message", flat=True)) == [
        "Resuming from checkpoint at step 20"
    ]


def test_a_pod_recorded_on_loan_is_reclaimed_by_an_owner_who_comes_later(personas):
    kept, newer = _full_cluster(personas)
    submit(personas, gpu=1, name="alice-more")  # a tick records the loan; nobody needs it yet
    assert list(newer.pods.values_list("in_quota", flat=True)) == [False]
    owner = submit(personas, ws="ws_b", user="charlie", quota="team-b", gpu=4, name="bob-next")
    assert owner.pending_reason == "borrowers being reclaimed: 1 job"
    newer.refresh_from_db()
    assert newer.status == JobStatus.QUEUING and newer.reason_code == "JobPreempted"
    kept.refresh_from_db()
    assert kept.status == JobStatus.RUNNING


def test_a_pod_on_loan_is_back_in_quota_once_its_min_is_raised_again(personas, client):
    from django.urls import reverse

    from apps.jobs.waiting import NOT_IN_QUOTA, sub_status

    kept, newer = _full_cluster(personas)
    waits = submit(personas, gpu=1, name="alice-more")  # a tick records the loan
    assert list(newer.pods.values_list("in_quota", flat=True)) == [False]
    waits.delete()
    _set_min_gpu("team-b", 8)
    _set_min_gpu("team-a", 8)
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))  # nothing queues
    newer.refresh_from_db()
    assert newer.status == JobStatus.RUNNING and sub_status(newer) != NOT_IN_QUOTA
    assert list(newer.pods.values_list("in_quota", flat=True)) == [True]
    assert list(newer.events.filter(kind="BackInQuota").values_list("message", flat=True)) == [
        "1 pod runs In Quota again: the min of quota team-a holds it"
    ]
    scheduler_tick(now=timezone.now() + timedelta(seconds=2))  # once only
    assert newer.events.filter(kind="BackInQuota").count() == 1
    owner = submit(personas, ws="ws_b", user="charlie", quota="team-b", gpu=4, name="bob-next")
    assert owner.status == JobStatus.QUEUING
    newer.refresh_from_db()
    assert newer.status == JobStatus.RUNNING
    client.force_login(personas["alice"])
    page = client.get(reverse("jobs:detail", args=[newer.job_id])).content.decode()
    assert '<span class="tag tag-out">Not in Quota</span>' not in page
