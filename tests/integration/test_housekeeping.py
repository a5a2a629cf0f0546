"""job_dirs_sweep on real directories: retention of work dirs, data, logs and checkpoints,
hostile links, unknown (deleted) jobs, disk-use recording, and the job page's disk line."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.agent.housekeeping import (
    SWEPT_MARKER,
    disk_usage,
    job_dirs_sweep,
    job_disk_report,
)
from apps.agent.models import PodProcess
from apps.jobs.models import Checkpoint, Job, JobRole, JobStatus, Pod, PodStatus

RETENTION = timedelta(hours=24)


@pytest.fixture
def root(tmp_path, settings):
    path = tmp_path / "pods"
    path.mkdir()
    settings.POD_WORK_ROOT = path
    return path


@pytest.fixture
def outside(tmp_path):
    """A directory no sweep may touch, which pods' links point at."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "precious.txt").write_text("keep me")
    return path


def make_job(personas, *, status=JobStatus.SUCCEEDED, finished_ago=timedelta(hours=25)) -> Job:
    now = timezone.now()
    finished = status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)
    job = Job.objects.create(
        workspace=personas["ws_a"],
        user=personas["alice"],
        display_name="train",
        user_command="python train.py",
        resource_source="quota",
        quota=personas["ws_a"].quotas.get(name="team-a"),
        status=status,
        submitted_at=now - finished_ago - timedelta(hours=1),
        status_changed_at=now - finished_ago if finished else now,
        started_at=now - finished_ago - timedelta(hours=1),
        finished_at=now - finished_ago if finished else None,
        enable_easyckpt=True,
    )
    role = JobRole.objects.create(job=job, role_type="Worker", pod_count=2, cpu=1000, memory=1024)
    for i in range(2):
        Pod.objects.create(
            job=job,
            role=role,
            index=i,
            pod_id=f"{job.job_id}-worker-{i}",
            status=PodStatus.SUCCEEDED if finished else PodStatus.RUNNING,
        )
    return job


def lay_out(root: Path, job_id: str, outside: Path, *, job: Job | None = None) -> Path:
    """A job directory as pods leave it: two work dirs (with files, a nested tree, links out
    and a FIFO), data/, logs/ and three checkpoints with their manifest and a temp file."""
    job_dir = root / job_id
    for i in range(2):
        work = job_dir / f"{job_id}-worker-{i}"
        (work / "nested" / "deeper").mkdir(parents=True)
        (work / "out.bin").write_bytes(os.urandom(20_000))
        (work / "nested" / "deeper" / "x").write_bytes(b"x" * 100)
        (work / "escape").symlink_to(outside)  # a link to a directory outside
        (work / "nested" / "slash").symlink_to("/")
        os.mkfifo(work / "fifo")
    (job_dir / "data" / "mnist").mkdir(parents=True)
    (job_dir / "data" / "mnist" / "train.bin").write_bytes(os.urandom(50_000))
    (job_dir / "data" / "link").symlink_to(outside / "precious.txt")
    (job_dir / "logs").mkdir()
    for i in range(2):
        (job_dir / "logs" / f"{job_id}-worker-{i}.log").write_text(f"[paiweb] pod {i}\n")
    ckpts = job_dir / "checkpoints"
    ckpts.mkdir()
    now = timezone.now()
    for n, step in enumerate((20, 40, 60)):
        (ckpts / f"ckpt-{step}.pkl").write_bytes(os.urandom(10_000))
        if job is not None:
            Checkpoint.objects.create(
                job=job,
                step=step,
                path=str(ckpts / f"ckpt-{step}.pkl"),
                size_bytes=10_000,
                created_at=now - timedelta(hours=30 - n),
            )
    (ckpts / "manifest.jsonl").write_text('{"step": 20}\n{"step": 40}\n{"step": 60}\n')
    (ckpts / ".ckpt-80.pkl.tmp").write_bytes(b"partial")
    return job_dir


def make_old(path: Path, age: timedelta) -> None:
    """Set the times of `path` and everything in it back by `age` (links themselves)."""
    then = (timezone.now() - age).timestamp()
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in (*dirnames, *filenames):
            os.utime(Path(dirpath) / name, (then, then), follow_symlinks=False)
    os.utime(path, (then, then), follow_symlinks=False)


def sweep(root: Path, keep: int = 2):
    return job_dirs_sweep(root=root, now=timezone.now(), retention=RETENTION, keep_checkpoints=keep)


def test_a_finished_job_past_retention_keeps_only_logs_and_the_newest_checkpoints(
    root, outside, personas
):
    job = make_job(personas, status=JobStatus.SUCCEEDED)
    job_dir = lay_out(root, job.job_id, outside, job=job)

    result = sweep(root, keep=2)

    assert result.swept == (job.job_id,) and result.failed == ()
    assert sorted(p.name for p in job_dir.iterdir()) == [SWEPT_MARKER, "checkpoints", "logs"]
    assert sorted(p.name for p in (job_dir / "checkpoints").iterdir()) == [
        "ckpt-40.pkl",
        "ckpt-60.pkl",
        "manifest.jsonl",
    ]
    assert sorted(p.name for p in (job_dir / "logs").iterdir()) == [
        f"{job.job_id}-worker-0.log",
        f"{job.job_id}-worker-1.log",
    ]
    assert (job_dir / "logs" / f"{job.job_id}-worker-1.log").read_text() == "[paiweb] pod 1\n"
    job.refresh_from_db()
    assert job.work_swept_at is not None and job.disk_measured_at is not None
    assert job.disk_bytes == disk_usage(job_dir).bytes
    assert 20_000 <= job.disk_bytes < 200_000  # two checkpoints, the manifest, logs, dirs
    # the row of the checkpoint removed says so; the kept ones' rows do not
    removed = dict(job.checkpoints.values_list("step", "removed_at"))
    assert removed[20] is not None and removed[40] is None and removed[60] is None
    # done once: the next rounds leave it alone
    swept_at = job.work_swept_at
    again = sweep(root, keep=1)
    assert again.swept == () and again.measured == ()
    job.refresh_from_db()
    assert job.work_swept_at == swept_at
    assert (job_dir / "checkpoints" / "ckpt-40.pkl").exists()


def test_retention_keeps_the_highest_steps_whatever_time_a_clock_ahead_recorded(
    root, outside, personas
):
    job = make_job(personas, status=JobStatus.SUCCEEDED)
    job_dir = lay_out(root, job.job_id, outside, job=job)
    job.checkpoints.filter(step=20).update(created_at=timezone.now() + timedelta(days=1))

    sweep(root, keep=2)

    assert sorted(p.name for p in (job_dir / "checkpoints").iterdir()) == [
        "ckpt-40.pkl",
        "ckpt-60.pkl",
        "manifest.jsonl",
    ]


def test_retention_keeps_no_checkpoint_a_restart_found_damaged(root, outside, personas):
    job = make_job(personas, status=JobStatus.SUCCEEDED)
    job_dir = lay_out(root, job.job_id, outside, job=job)
    job.checkpoints.filter(step=60).update(damaged_at=timezone.now())

    sweep(root, keep=2)

    assert sorted(p.name for p in (job_dir / "checkpoints").iterdir()) == [
        "ckpt-20.pkl",
        "ckpt-40.pkl",
        "manifest.jsonl",
    ]


def test_links_out_of_a_work_dir_are_never_followed(root, outside, personas):
    job = make_job(personas, status=JobStatus.FAILED)
    job_dir = lay_out(root, job.job_id, outside, job=job)
    (job_dir / f"{job.job_id}-worker-0" / "deep-escape").symlink_to(outside / "precious.txt")
    (job_dir / "checkpoints" / "ckpt-99.pkl").symlink_to(outside / "precious.txt")

    assert sweep(root).swept == (job.job_id,)

    assert (outside / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert not (job_dir / f"{job.job_id}-worker-0").exists()


def test_a_symlinked_checkpoint_row_is_not_kept(root, outside, personas):
    job = make_job(personas, status=JobStatus.STOPPED)
    job_dir = lay_out(root, job.job_id, outside, job=job)
    ckpt = job_dir / "checkpoints" / "ckpt-60.pkl"
    ckpt.unlink()
    ckpt.symlink_to(outside / "precious.txt")  # the newest row's file is now a link

    sweep(root, keep=2)

    assert sorted(p.name for p in (job_dir / "checkpoints").iterdir()) == [
        "ckpt-20.pkl",
        "ckpt-40.pkl",
        "manifest.jsonl",
    ]
    assert (outside / "precious.txt").read_text() == "keep me"


def test_running_and_recently_finished_jobs_keep_everything(root, outside, personas):
    running = make_job(personas, status=JobStatus.RUNNING)
    recent = make_job(personas, status=JobStatus.SUCCEEDED, finished_ago=timedelta(hours=2))
    dirs = {job.job_id: lay_out(root, job.job_id, outside, job=job) for job in (running, recent)}
    before = {job_id: sorted(map(str, path.rglob("*"))) for job_id, path in dirs.items()}

    result = sweep(root)

    assert result.swept == () and result.removed == ()
    assert set(result.measured) == {running.job_id, recent.job_id}
    for job in (running, recent):
        assert sorted(map(str, dirs[job.job_id].rglob("*"))) == before[job.job_id]
        job.refresh_from_db()
        assert job.work_swept_at is None
        assert job.disk_bytes == disk_usage(dirs[job.job_id]).bytes
        assert job.disk_bytes > 2 * 20_000 + 50_000 + 3 * 10_000


def test_a_finished_job_whose_pod_process_still_lives_is_not_swept(root, outside, personas):
    job = make_job(personas, status=JobStatus.FAILED)
    job_dir = lay_out(root, job.job_id, outside, job=job)
    PodProcess.objects.create(
        pod=job.pods.first(), queue="node.x", state="running", queued_at=timezone.now()
    )

    result = sweep(root)

    assert result.swept == () and result.measured == (job.job_id,)
    assert (job_dir / f"{job.job_id}-worker-0" / "out.bin").exists()


def test_a_job_swept_on_another_host_is_swept_here_too(root, outside, personas):
    job = make_job(personas, status=JobStatus.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(work_swept_at=timezone.now() - timedelta(hours=1))
    job_dir = lay_out(root, job.job_id, outside, job=job)

    assert sweep(root).swept == (job.job_id,)
    assert not (job_dir / "data").exists() and (job_dir / SWEPT_MARKER).is_file()


def test_an_unknown_directory_is_removed_whole_after_retention(root, outside, personas):
    old = lay_out(root, "dlc0000000000dead", outside)
    make_old(old, timedelta(hours=25))
    young = lay_out(root, "dlc00000000000new", outside)
    make_old(young, timedelta(hours=25))
    os.utime(young / "logs" / "dlc00000000000new-worker-0.log")  # the agent wrote lately

    result = sweep(root)

    assert result.removed == ("dlc0000000000dead",) and result.failed == ()
    assert not old.exists()
    assert (young / "data" / "mnist" / "train.bin").exists()
    assert (outside / "precious.txt").read_text() == "keep me"


def test_job_disk_report_records_the_numbers(personas):
    job = make_job(personas, status=JobStatus.RUNNING)
    at = timezone.now() - timedelta(minutes=2)

    job_disk_report(job_pk=job.pk, bytes=12_897_485, now=at)

    job.refresh_from_db()
    assert (job.disk_bytes, job.disk_measured_at) == (12_897_485, at)


def test_the_job_page_shows_the_disk_use(alice_client, personas, settings):
    settings.POD_WORK_RETENTION_HOURS = 24
    job = make_job(personas, status=JobStatus.SUCCEEDED)
    url = reverse("jobs:detail", args=[job.job_id])
    assert 'id="disk-use"' not in alice_client.get(url).content.decode()  # not measured yet

    job_disk_report(
        job_pk=job.pk, bytes=int(12.3 * 1024 * 1024), now=timezone.now() - timedelta(minutes=2)
    )
    body = alice_client.get(url).content.decode()
    assert "<dt>Disk</dt>" in body
    assert '12.3 MiB <span class="muted">(work dirs, checkpoints, data, logs) · measured' in body
    assert "2 min ago</time>" in body
    assert "work dirs removed after" not in body

    Job.objects.filter(pk=job.pk).update(work_swept_at=timezone.now())
    body = alice_client.get(url).content.decode()
    assert "work dirs removed after 24 h; logs and the latest checkpoints kept" in body
    # the live fragment (the page's poll) carries it too
    live = alice_client.get(url, headers={"HX-Request": "true", "HX-Target": "job-live"})
    assert "12.3 MiB" in live.content.decode()
