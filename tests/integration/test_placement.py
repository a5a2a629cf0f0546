"""FGD placement in the live tick (SCHEDULER_PLACEMENT=fgd): the target workload is the mix of
quota pods submitted lately, and a share goes on the GPU where it fragments that mix least,
not where it fits tightest."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.models import Job, JobStatus, ResourceSource
from apps.jobs.services import job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.scheduler import engine
from apps.scheduler.selectors import recent_workload
from apps.scheduler.services import scheduler_config

pytestmark = pytest.mark.django_db(transaction=True)


def submit(personas, role: RoleSpec, *, name: str) -> Job:
    spec = JobSpec(display_name=name, user_command="true", quota="team-a", roles=[role])
    job = job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)
    job.refresh_from_db()
    return job


def share(milli: int) -> RoleSpec:
    return RoleSpec(cpu=1000, memory=1024, gpu=0, gpu_milli=milli)


@pytest.mark.parametrize(("placement", "same_gpu"), [("best_fit", True), ("fgd", False)])
def test_a_share_goes_where_the_placement_rule_says(personas, settings, placement, same_gpu):
    """0.3 of a GPU beside 0.5 leaves 0.2 that neither recent shape can use: best fit takes
    the tightest GPU anyway, FGD an empty one (which still holds a 0.5 or a 0.3 after)."""
    settings.SCHEDULER_PLACEMENT = placement
    half = submit(personas, share(500), name="half")
    third = submit(personas, share(300), name="third")
    spots = {}
    for job in (half, third):
        assert job.status == JobStatus.RUNNING
        (pod,) = job.pods.all()
        spots[job.display_name] = (pod.node.name, pod.gpu_ids)
        assert pod.gpu_ids.isdigit()  # one named GPU: what CUDA_VISIBLE_DEVICES is set to
    assert (spots["half"] == spots["third"]) is same_gpu


def test_the_workload_is_the_quota_pods_submitted_in_the_window(personas, settings):
    now = timezone.now()
    submit(personas, share(500), name="half")
    submit(personas, RoleSpec(pod_count=2, cpu=4000, memory=16384, gpu=1), name="pair")
    old = submit(personas, RoleSpec(pod_count=1, cpu=8000, memory=16384, gpu=4), name="old")
    spot = submit(personas, share(250), name="as-if-spot")
    Job.objects.filter(pk=old.pk).update(submitted_at=now - timedelta(hours=169))
    Job.objects.filter(pk=spot.pk).update(resource_source=ResourceSource.SPOT)

    workload = recent_workload(since=now - timedelta(hours=168))

    # one share of 0.5 GPU and two whole-GPU pods: the old job and the market's job left out
    assert workload == ((500, 1000, pytest.approx(1 / 3)), (1000, 4000, pytest.approx(2 / 3)))
    assert workload == engine.target_workload([(500, 1000, 1), (1000, 4000, 2)])
    settings.SCHEDULER_PLACEMENT = "fgd"
    settings.SCHEDULER_WORKLOAD_HOURS = 168
    config = scheduler_config(now=now)
    assert (config.placement, config.workload) == ("fgd", workload)
    settings.SCHEDULER_PLACEMENT = "best_fit"
    config = scheduler_config(now=now)
    assert (config.placement, config.workload) == ("best_fit", ())


def test_an_empty_window_leaves_fgd_the_queue_mix(personas, settings):
    settings.SCHEDULER_PLACEMENT = "fgd"
    assert scheduler_config(now=timezone.now()).workload == ()  # no job yet
    job = submit(personas, share(500), name="first")  # the engine weighs the queue's mix
    assert job.status == JobStatus.RUNNING


def test_under_fgd_the_scheduler_names_whole_gpus_too(personas, settings):
    settings.SCHEDULER_PLACEMENT = "fgd"
    pair = submit(personas, RoleSpec(cpu=4000, memory=16384, gpu=2), name="pair")
    other = submit(personas, RoleSpec(cpu=4000, memory=16384, gpu=2), name="other")
    named = [(p.node_id, set(p.gpu_ids.split(","))) for j in (pair, other) for p in j.pods.all()]
    # no placement of a pair fragments anything for pairs: every node ties, and ties go by
    # a fixed order of the nodes, so the second pair goes beside the first, on other GPUs
    assert named[0][0] == named[1][0]
    assert [gpus for _, gpus in named] == [{"0", "1"}, {"2", "3"}]


def test_turning_fgd_on_with_jobs_running_never_names_a_gpu_twice(personas, settings, monkeypatch):
    """Pods the agent named under best fit keep their GPUs; FGD counts them and names only
    others, on the same node or not."""
    from apps.agent import tasks

    settings.EXECUTION_BACKEND = "agent"
    monkeypatch.setattr(tasks.pod_start_task, "apply_async", lambda args, queue: None)
    before = [
        submit(personas, RoleSpec(cpu=4000, memory=16384, gpu=1), name=f"whole-{i}")
        for i in range(3)
    ]
    before.append(submit(personas, share(500), name="half"))
    settings.SCHEDULER_PLACEMENT = "fgd"
    after = [
        submit(personas, RoleSpec(cpu=4000, memory=16384, gpu=2), name="pair"),
        submit(personas, share(700), name="share"),
        submit(personas, RoleSpec(cpu=4000, memory=16384, gpu=1), name="one"),
    ]
    held: dict[tuple[int, int], int] = {}
    for job in before + after:
        (pod,) = job.pods.all()
        assert pod.gpu_ids, job.display_name
        role = pod.role
        for gpu in map(int, pod.gpu_ids.split(",")):
            held[(pod.node_id, gpu)] = held.get((pod.node_id, gpu), 0) + (role.gpu_milli or 1000)
    assert all(milli <= 1000 for milli in held.values()), held
