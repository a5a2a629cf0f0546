"""The job page's checkpoints: the latest few open, the rest folded with a count, file names
rather than server paths."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from apps.agent.services import checkpoint_resumed
from apps.jobs.models import Checkpoint, Job, JobEvent, JobRestart, JobStatus, Pod
from apps.scheduler.services import resumed_events
from tests.web.test_job_story import section, text, text_of
from tests.web.test_jobs_views import make_job


def _checkpoints(job, count):
    now = timezone.now()
    for i in range(count):
        Checkpoint.objects.create(
            job=job,
            step=100 * (i + 1),
            path=f"/var/lib/paiweb/pods/{job.job_id}/checkpoints/step-{100 * (i + 1)}.pt",
            size_bytes=1024,
            created_at=now - timedelta(minutes=count - i),
        )


def test_it_shows_the_latest_checkpoints_and_folds_the_rest(alice_client, personas):
    job = make_job(personas)
    _checkpoints(job, 8)
    response = alice_client.get(reverse("jobs:detail", args=[job.job_id]))
    part = section(response, "checkpoints")
    open_part = part[: part.index('id="older-checkpoints"')]
    assert [s in open_part for s in ("step-800.pt", "step-700.pt", "step-600.pt")] == [True] * 3
    assert "step-500.pt" not in open_part
    older = section(response, "older-checkpoints")
    assert "5 older checkpoints" in older and "step-100.pt" in older
    # the file name is shown, the server path only on hover
    assert f'title="/var/lib/paiweb/pods/{job.job_id}/checkpoints/step-800.pt"' in part
    assert f">/var/lib/paiweb/pods/{job.job_id}" not in part
    assert "Latest checkpoint step 800" in text(response)


def test_a_few_checkpoints_are_all_open_and_many_say_only_the_latest_are_listed(
    alice_client, personas
):
    few = make_job(personas, name="few")
    _checkpoints(few, 2)
    response = alice_client.get(reverse("jobs:detail", args=[few.job_id]))
    assert 'id="older-checkpoints"' not in response.content.decode()
    many = make_job(personas, name="many")
    _checkpoints(many, 53)
    older = section(
        alice_client.get(reverse("jobs:detail", args=[many.job_id])), "older-checkpoints"
    )
    assert "47+ older checkpoints" in older and "The latest 50 checkpoints are listed" in older


def test_it_lists_only_checkpoints_whose_files_are_left(alice_client, personas):
    job = make_job(personas)
    _checkpoints(job, 6)
    Checkpoint.objects.filter(job=job, step__lte=400).update(removed_at=timezone.now())
    response = alice_client.get(reverse("jobs:detail", args=[job.job_id]))
    part = section(response, "checkpoints")
    assert "step-600.pt" in part and "step-500.pt" in part
    assert "step-400.pt" not in part and "step-100.pt" not in part
    assert 'id="older-checkpoints"' not in part  # two left: both open
    assert "4 older checkpoints not listed: their files were removed" in text(response)
    Checkpoint.objects.filter(job=job).update(removed_at=timezone.now())
    response = alice_client.get(reverse("jobs:detail", args=[job.job_id]))
    assert "No checkpoint files left." in text(response)
    assert "6 older checkpoints not listed" in text(response)


def test_the_overview_says_easyckpt_off_truthfully_when_the_job_saved_checkpoints(
    alice_client, personas
):
    """The helper is on every pod's path: a job with EasyCkpt off whose code saved checkpoints
    read "EasyCkpt Off" above the list of them."""
    job = make_job(personas)
    assert not job.enable_easyckpt
    url = reverse("jobs:detail", args=[job.job_id])
    assert "EasyCkpt Off " in text(alice_client.get(url))
    _checkpoints(job, 2)
    response = alice_client.get(url)
    assert "EasyCkpt Off — the job's code saves checkpoints itself" in text(response)
    assert "step-200.pt" in section(response, "checkpoints")
    job.enable_easyckpt = True
    job.save(update_fields=["enable_easyckpt"])
    assert "EasyCkpt On " in text(alice_client.get(url))


def test_a_requeued_job_is_said_to_resume_from_the_step_its_load_will_take(alice_client, personas):
    """The waiting job's page names the step EasyCkpt will load (`lifecycle.resume_step`),
    as its Resumed event will: not one stamped later by a clock ahead, not a damaged one
    (marked so in the list), not one whose file is gone."""
    job = make_job(personas, status=JobStatus.QUEUING)
    Job.objects.filter(pk=job.pk).update(attempt=1)
    now = timezone.now()
    JobRestart.objects.create(job=job, number=1, at=now, cause="JobPreempted")
    for step, at, removed, damaged in [
        (20, now - timedelta(seconds=20), None, None),
        (30, now - timedelta(seconds=10), None, now),  # its load passed over it
        (40, now - timedelta(seconds=5), now, None),  # its file is gone
        (10, now + timedelta(hours=1), None, None),  # a clock ahead stamped it
    ]:
        job.checkpoints.create(
            step=step,
            path=f"/ckpt/ckpt-{step:012d}.pkl",
            created_at=at,
            removed_at=removed,
            damaged_at=damaged,
        )
    response = alice_client.get(reverse("jobs:detail", args=[job.job_id]))
    assert "it resumes from the checkpoint at step 20." in section(response, "pending")
    rows = section(response, "checkpoints")
    assert rows.count(">damaged</span>") == 1


def test_a_resume_past_a_damaged_checkpoint_reads_whole_in_chinese(alice_client, personas):
    """The Resumed event naming the file passed over reads as its own message in Chinese, not
    as a shorter template ("{message} ({reason})", "{message}; {more_message}") holding the
    English rest."""
    job = make_job(personas, status=JobStatus.RUNNING)
    job.events.create(
        at=timezone.now(),
        kind="Resumed",
        message=(
            "Damaged checkpoints passed over: ckpt-000000000230.pkl;"
            " resumed from checkpoint at step 220"
        ),
    )
    response = alice_client.get(
        reverse("jobs:detail", args=[job.job_id]), headers={"accept-language": "zh-CN"}
    )
    events = text_of(section(response, "events"))
    assert "已跳过损坏的检查点：ckpt-000000000230.pkl；已从第 220 步的检查点恢复" in events
    assert "passed over" not in events


def test_a_resume_past_a_damaged_checkpoint_reads_as_a_plan_then_what_came_of_it(
    alice_client, personas
):
    """Placed again after an interruption, the job's event says the step its load will try,
    230, as an intent; the load passes over that step's damaged file for step 220 and says
    so. The events read a plan, then what came of it, never two resumes from different
    steps, in English and in Chinese; the page shows the step really resumed from."""
    job = make_job(personas, status=JobStatus.RUNNING, pods=1)
    Job.objects.filter(pk=job.pk).update(attempt=1)
    Pod.objects.filter(job=job).update(attempt=1)
    job.refresh_from_db()
    now = timezone.now()
    JobRestart.objects.create(
        job=job, number=1, at=now - timedelta(minutes=1), cause="JobPreempted"
    )
    for step in (220, 230):
        job.checkpoints.create(
            step=step,
            path=f"/ckpt/ckpt-{step:012d}.pkl",
            created_at=now - timedelta(minutes=300 - step),
        )
    JobEvent.objects.bulk_create(resumed_events(jobs=[job], now=now - timedelta(seconds=20)))
    checkpoint_resumed(
        pod_pk=job.pods.get().pk,
        step=220,
        path="/ckpt/ckpt-000000000220.pkl",
        damaged=["/ckpt/ckpt-000000000230.pkl"],
        at=now - timedelta(seconds=10),
    )
    url = reverse("jobs:detail", args=[job.job_id])
    response = alice_client.get(url)
    events = text_of(section(response, "events"))
    loaded = (
        "Damaged checkpoints passed over: ckpt-000000000230.pkl;"
        " resumed from checkpoint at step 220"
    )
    assert "Resuming from checkpoint at step 230" in events and loaded in events
    assert events.index(loaded) < events.index(
        "Resuming from checkpoint at step 230"
    )  # newest first
    assert "Resumed from checkpoint at step 230" not in events
    assert loaded in text_of(section(response, "resumed"))
    zh = text_of(section(alice_client.get(url, headers={"accept-language": "zh-CN"}), "events"))
    assert "将从第 230 步的检查点恢复" in zh
    assert "已跳过损坏的检查点：ckpt-000000000230.pkl；已从第 220 步的检查点恢复" in zh
    assert "Resuming" not in zh
