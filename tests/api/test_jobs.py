"""The job calls of PAI-DLC 2020-12-03 through the official SDK: CreateJob, GetJob,
ListJobs, UpdateJob, StopJob, DeleteJob, GetJobEvents, GetPodEvents, GetPodLogs."""

from __future__ import annotations

import inspect
import json
import re
from datetime import timedelta

import pytest
from alibabacloud_pai_dlc20201203.models import (
    GetJobEventsRequest,
    GetJobRequest,
    GetPodEventsRequest,
    GetPodLogsRequest,
    ListJobsRequest,
    UpdateJobRequest,
)
from django.utils import timezone

from apps.agent.logs import pod_log_path
from apps.jobs.models import Job, JobStatus, Pod, PodStatus
from apps.jobs.services import job_event
from tests.api.conftest import quota_job_body, sdk_error, spot_job_body

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
AIMASTER = {
    "OversoldType": "AcceptQuotaOverSold",
    "EnableErrorMonitoringInAIMaster": True,
    "ErrorMonitoringArgs": "--job-execution-mode=Async --enable-job-restart=True "
    "--max-num-of-job-restart=5 --enable-log-hang-detection=True",
    "AdvancedSettings": {"EnableEasyCkpt": True},
}


def test_it_creates_a_quota_job_with_idle_resources_aimaster_and_easyckpt(dlc, create_job, ws_a):
    job_id = create_job(
        quota_job_body(ws_a, Priority=4, Settings=AIMASTER, JobMaxRunningTimeMinutes=90)
    )

    job = Job.objects.get(job_id=job_id)
    assert (job.resource_source, job.quota.name, job.idle_mode) == ("quota", "team-a", "acceptable")
    assert (job.enable_aimaster, job.execution_mode, job.max_restarts) == (True, "Async", 5)
    assert job.enable_easyckpt and job.priority == 4 and job.max_running_time_minutes == 90
    role = job.roles.get()
    assert (role.cpu, role.memory, role.gpu, role.pod_count) == (8000, 32768, 2, 2)

    body = dlc.get_job(job_id, GetJobRequest()).body
    assert body.settings.oversold_type == "AcceptQuotaOverSold"
    assert body.settings.enable_error_monitoring_in_aimaster is True
    assert body.settings.error_monitoring_args == (
        "--job-execution-mode=Async --enable-job-restart=True --max-num-of-job-restart=5"
    )
    assert body.settings.advanced_settings == {"EnableEasyCkpt": True}
    assert body.restart_times == "0/5"
    assert body.resource_id == "team-a" and body.resource_type == "ECS"


def test_it_turns_off_restarts_when_aimaster_says_so(create_job, ws_a):
    settings = {
        "EnableErrorMonitoringInAIMaster": True,
        "ErrorMonitoringArgs": "--enable-job-restart=False",
    }
    job = Job.objects.get(job_id=create_job(quota_job_body(ws_a, Settings=settings)))
    assert (job.enable_aimaster, job.max_restarts, job.execution_mode) == (True, 0, "Sync")


@pytest.mark.parametrize(
    ("oversold", "idle_mode"),
    [
        ("ForbiddenQuotaOverSold", "off"),
        ("AcceptQuotaOverSold", "acceptable"),
        ("ForceQuotaOverSold", "only_idle"),
    ],
)
def test_it_maps_oversold_type_to_the_idle_mode(create_job, ws_a, oversold, idle_mode):
    job_id = create_job(quota_job_body(ws_a, Settings={"OversoldType": oversold}))
    assert Job.objects.get(job_id=job_id).idle_mode == idle_mode


def test_it_creates_a_pay_as_you_go_job_without_resource_id(dlc, create_job, ws_a):
    body = spot_job_body(ws_a)
    del body["JobSpecs"][0]["SpotSpec"]
    job_id = create_job(body)
    job = Job.objects.get(job_id=job_id)
    assert (job.resource_source, job.quota, job.status) == ("public", None, "Queuing")
    detail = dlc.get_job(job_id, GetJobRequest()).body
    assert detail.resource_id is None and detail.job_specs[0].spot_spec is None


def test_get_job_sends_the_fields_newer_sdks_model(raw, create_job, ws_a):
    job_id = create_job(quota_job_body(ws_a, UserVpc={"VpcId": "vpc-1"}))
    body = raw.send("GET", f"/api/v1/jobs/{job_id}").json()
    assert (body["RequestCPU"], body["RequestGPU"], body["RequestMemory"]) == (16, 4.0, 64.0)
    assert body["UserVpc"] == {"VpcId": "vpc-1"}
    assert body["JobSpecs"][0]["QuotaId"] == "team-a"
    assert body["Settings"]["TerminationGracePeriodSeconds"] == 30
    assert all(isinstance(p["Duration"], float) for p in body["Pods"] if "Duration" in p)


def test_get_job_reports_every_field_in_the_sdk_types(dlc, create_job, ws_a):
    job_id = create_job(
        quota_job_body(
            ws_a,
            Envs={"EPOCHS": "3"},
            DataSources=[{"Uri": "oss://bucket/imagenet/", "MountPath": "/mnt/data/imagenet/"}],
            CodeSource={"CodeSourceId": "code-1", "Branch": "main", "MountPath": "/root/code/"},
            UserVpc={"VpcId": "vpc-1", "SwitchId": "vsw-1", "SecurityGroupId": "sg-1"},
        )
    )
    body = dlc.get_job(job_id, GetJobRequest()).body

    assert (body.job_id, body.display_name, body.job_type) == (job_id, "train-resnet", "PyTorchJob")
    assert body.workspace_id == ws_a and body.workspace_name == "team-a"
    # The scheduler places it at once (tasks run eagerly in tests).
    assert body.status in ("EnvPreparing", "Running")
    for stamp in (body.gmt_create_time, body.gmt_submitted_time, body.gmt_running_time):
        assert ISO_UTC.match(stamp)
    assert isinstance(body.duration, int) and isinstance(body.priority, int)
    assert body.restart_times == "0/0"
    assert body.envs == {"EPOCHS": "3"}
    assert body.data_sources[0].uri == "oss://bucket/imagenet/"
    assert body.data_sources[0].mount_path == "/mnt/data/imagenet/"
    assert (body.code_source.code_source_id, body.code_source.mount_path) == (
        "code-1",
        "/root/code/",
    )
    history = [h.status for h in body.status_history]
    assert history[:3] == ["Creating", "Queuing", "EnvPreparing"] and history[-1] == body.status
    assert all(ISO_UTC.match(h.start_time) for h in body.status_history)
    assert body.status_history[0].end_time == body.status_history[1].start_time
    [spec] = body.job_specs
    assert (spec.type, spec.pod_count, spec.image) == ("Worker", 2, "pytorch:2.3")
    assert spec.resource_config.to_map() == {"CPU": "8", "Memory": "32Gi", "GPU": "2"}
    if hasattr(body, "request_cpu"):  # not in SDK 1.4.17's model; always on the wire
        assert body.request_cpu == 16 and body.request_gpu == 4.0 and body.request_memory == 64.0
    assert body.settings.oversold_type == "ForbiddenQuotaOverSold"
    assert body.resource_level == "InQuota"
    pods = body.pods
    assert len(pods) == 2 and {p.type for p in pods} == {"Worker"}
    assert all(p.status == "Running" and p.resource_type == "InQuota" for p in pods)
    assert all(p.history_pods == [] and p.pod_uid and ISO_UTC.match(p.gmt_start_time) for p in pods)
    if hasattr(body, "user_vpc"):  # the current SDK models UserVpc on GetJob
        assert body.user_vpc.vpc_id == "vpc-1"


def test_get_job_shows_the_pods_a_restart_replaced_as_history_pods(dlc, create_job, ws_a):
    job_id = create_job(quota_job_body(ws_a, Settings=AIMASTER))
    job = Job.objects.get(job_id=job_id)
    first = list(job.pods.order_by("index"))
    now = timezone.now()
    job.pods.update(status=PodStatus.PREEMPTED, reason="Preempted", finished_at=now)
    Job.objects.filter(pk=job.pk).update(attempt=1, restart_times=1)
    for old in first:
        Pod.objects.create(
            job=job,
            role=old.role,
            index=old.index,
            attempt=1,
            pod_id=old.pod_id.replace("-a0", "-a1"),
            node=old.node,
            in_quota=False,
            status=PodStatus.RUNNING,
            started_at=now + timedelta(seconds=5),
        )

    body = dlc.get_job(job_id, GetJobRequest()).body

    assert body.restart_times == "1/5"
    assert body.resource_level == "NotInQuota"
    assert [p.pod_id for p in body.pods] == [p.pod_id.replace("-a0", "-a1") for p in first]
    for pod, old in zip(body.pods, first, strict=True):
        assert (pod.status, pod.resource_type) == ("Running", "NotInQuota")
        [history] = pod.history_pods
        assert (history.pod_id, history.status) == (old.pod_id, "Preempted")
        assert history.pod_uid != pod.pod_uid


def test_pod_events_and_logs_of_a_history_pod_by_its_pod_uid(dlc, create_job, ws_a):
    """As on DLC, a history pod is reached by its own PodId, or by the PodId of the pod that
    replaced it with the history pod's PodUid (DLC gives every attempt one PodId); a PodUid
    of another slot's pod is a 404."""
    job_id = create_job(quota_job_body(ws_a, Settings=AIMASTER))
    job = Job.objects.get(job_id=job_id)
    first = list(job.pods.order_by("index"))
    now = timezone.now()
    job.pods.update(status=PodStatus.PREEMPTED, reason="Preempted", finished_at=now)
    Job.objects.filter(pk=job.pk).update(attempt=1, restart_times=1)
    for old in first:
        job_event(job=job, pod=old, kind="PodPreempted", message=f"{old.index} preempted", now=now)
        Pod.objects.create(
            job=job,
            role=old.role,
            index=old.index,
            attempt=1,
            pod_id=old.pod_id.replace("-a0", "-a1"),
            node=old.node,
            status=PodStatus.RUNNING,
            started_at=now + timedelta(seconds=5),
        )
    pods = dlc.get_job(job_id, GetJobRequest()).body.pods
    current, [history] = pods[0], pods[0].history_pods
    other_history = pods[1].history_pods[0]

    for pod_id in (history.pod_id, current.pod_id):
        request = GetPodEventsRequest(pod_uid=history.pod_uid)
        said = dlc.get_pod_events(job_id, pod_id, request).body
        assert (said.pod_id, said.pod_uid) == (history.pod_id, history.pod_uid)
        assert [e.split(": ", 1)[1] for e in said.events] == ["0 preempted"]
        logs = dlc.get_pod_logs(job_id, pod_id, GetPodLogsRequest(pod_uid=history.pod_uid))
        assert (logs.body.pod_id, logs.body.logs) == (history.pod_id, [])
    with pytest.raises(Exception) as caught:
        dlc.get_pod_events(
            job_id, current.pod_id, GetPodEventsRequest(pod_uid=other_history.pod_uid)
        )
    assert sdk_error(caught) == ("EntityNotExist.Pod", 404)
    # the PodId checked and the PodUid not found among its attempts, both
    said = f"The pod {current.pod_id!r} has no attempt with PodUid {other_history.pod_uid!r}."
    assert said in str(caught.value)
    with pytest.raises(Exception) as caught:
        dlc.get_pod_logs(job_id, current.pod_id, GetPodLogsRequest(pod_uid=other_history.pod_uid))
    assert sdk_error(caught) == ("EntityNotExist.Pod", 404) and said in str(caught.value)


def test_list_jobs_filters_sorts_and_pages(dlc, dlc_for, raw, create_job, ws_a):
    quota_id = create_job(
        quota_job_body(
            ws_a, DisplayName="alpha-quota", Settings={"OversoldType": "AcceptQuotaOverSold"}
        )
    )
    spot_id = create_job(spot_job_body(ws_a, DisplayName="beta-spot"))
    bob_id = create_job(spot_job_body(ws_a, DisplayName="gamma-bob"), client=dlc_for("bob"))

    def ids(**params) -> list[str]:
        if set(params) <= set(inspect.signature(ListJobsRequest).parameters):
            return [j.job_id for j in dlc.list_jobs(ListJobsRequest(**params)).body.jobs]
        # SDK 1.4.17 has no PaymentType yet: the same query, signed by hand.
        query = {"".join(w.title() for w in k.split("_")): v for k, v in params.items()}
        return [j["JobId"] for j in raw.send("GET", "/api/v1/jobs", query=query).json()["Jobs"]]

    assert ids() == [bob_id, spot_id, quota_id]  # newest first
    assert ids(sort_by="DisplayName", order="asc") == [quota_id, spot_id, bob_id]
    assert ids(status="Bidding") == [bob_id, spot_id]
    # Status in any case, as SortBy, Order and JobType
    assert ids(status="bidding") == ids(status="BIDDING, stopped") == [bob_id, spot_id]
    with pytest.raises(Exception) as caught:
        dlc.list_jobs(ListJobsRequest(status="Bidding,Walking"))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "Status: 'Walking' is not a job status" in str(caught.value)
    assert ids(payment_type="PrePaid") == [quota_id]
    assert ids(payment_type="Spot") == [bob_id, spot_id]
    assert ids(payment_type="PostPaid") == []
    assert ids(oversold_info="AcceptQuotaOverSold") == [quota_id]
    assert ids(oversold_info="AcceptQuotaOverSold-false") == [quota_id]  # all pods In Quota
    assert ids(oversold_info="acceptquotaoversold-FALSE") == [quota_id]  # in any case
    assert ids(oversold_info="AcceptQuotaOverSold-true") == []
    assert ids(oversold_info="ForbiddenQuotaOverSold") == []
    assert ids(resource_quota_name="team") == [quota_id]
    assert ids(show_own=True) == [spot_id, quota_id]
    assert ids(display_name="BETA") == [spot_id]
    assert ids(workspace_id=ws_a, page_size=2, page_number=2) == [quota_id]
    tomorrow = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ids(start_time=tomorrow) == []
    assert ids(job_type="PyTorchJob") == ids(job_type="pytorchjob") == [bob_id, spot_id, quota_id]
    assert ids(job_type="TFJob") == ids(job_type="OneFlowJob") == []
    with pytest.raises(Exception) as caught:
        dlc.list_jobs(ListJobsRequest(job_type="PyTorch"))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "JobType: must be one of PyTorchJob, TFJob" in str(caught.value)

    page = dlc.list_jobs(ListJobsRequest(page_size=1)).body
    assert page.total_count == 3 and len(page.jobs) == 1
    item = dlc.list_jobs(ListJobsRequest(job_id=quota_id)).body.jobs[0]
    assert (item.username, item.resource_quota_name, item.node_count) == ("alice", "team-a", "2")
    assert (item.request_gpu, item.request_memory, item.use_oversold_resource) == ("4", "64", True)
    assert item.job_specs[0].pod_count == 2 and item.settings.oversold_type == "AcceptQuotaOverSold"


def test_it_stops_a_job_and_a_second_stop_changes_nothing(dlc, create_job, ws_a):
    """A script that stops a job again (a retry, a cleanup step) gets the JobId back, as
    from the first call; the job keeps its stop time and gains no event."""
    job_id = create_job(spot_job_body(ws_a))
    assert dlc.stop_job(job_id).body.job_id == job_id
    body = dlc.get_job(job_id, GetJobRequest()).body
    assert body.status == "Stopped" and body.reason_code == "JobStoppedByUser"
    assert ISO_UTC.match(body.gmt_stopped_time) and body.gmt_finish_time == body.gmt_stopped_time
    events = dlc.get_job_events(job_id, GetJobEventsRequest()).body.events

    assert dlc.stop_job(job_id).body.job_id == job_id
    again = dlc.get_job(job_id, GetJobRequest()).body
    assert (again.status, again.gmt_stopped_time) == ("Stopped", body.gmt_stopped_time)
    assert dlc.get_job_events(job_id, GetJobEventsRequest()).body.events == events


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED])
def test_it_refuses_to_stop_a_job_that_ended_by_itself(dlc, create_job, ws_a, status):
    job_id = create_job(spot_job_body(ws_a))
    Job.objects.filter(job_id=job_id).update(status=status, finished_at=timezone.now())
    with pytest.raises(Exception) as caught:
        dlc.stop_job(job_id)
    assert sdk_error(caught) == ("JobAlreadyFinished", 409)
    assert f"job {job_id} has already ended ({status}): there is nothing to stop" in str(
        caught.value
    )
    assert Job.objects.get(job_id=job_id).status == status


def test_it_deletes_only_finished_jobs(dlc, create_job, ws_a):
    job_id = create_job(spot_job_body(ws_a))
    with pytest.raises(Exception) as caught:
        dlc.delete_job(job_id)
    assert sdk_error(caught) == ("JobNotFinished", 409)
    dlc.stop_job(job_id)
    assert dlc.delete_job(job_id).body.job_id == job_id
    assert not Job.objects.filter(job_id=job_id).exists()
    with pytest.raises(Exception) as caught:
        dlc.get_job(job_id, GetJobRequest())
    assert sdk_error(caught) == ("EntityNotExist.Job", 404)


def test_it_changes_the_priority_of_a_queued_quota_job(dlc, create_job, ws_a):
    def team_a(gpu: str, pods: int = 1) -> dict:
        return quota_job_body(
            ws_a,
            ResourceId="team-a",
            JobSpecs=[
                {
                    "Type": "Worker",
                    "PodCount": pods,
                    "ResourceConfig": {"CPU": "4", "Memory": "8Gi", "GPU": gpu},
                }
            ],
        )

    create_job(team_a("4"))  # half of team-a's 8 GPU
    job_id = create_job(team_a("4", pods=2))
    assert Job.objects.get(job_id=job_id).status == JobStatus.QUEUING  # 8 GPU, 4 free
    dlc.update_job(job_id, UpdateJobRequest(priority=7))
    assert Job.objects.get(job_id=job_id).priority == 7
    assert "PriorityChanged" in " ".join(
        dlc.get_job_events(job_id, GetJobEventsRequest()).body.events
    )


@pytest.mark.parametrize(
    ("make", "request_", "code", "status"),
    [
        ("spot", UpdateJobRequest(priority=3), "InvalidParameter", 400),
        ("stopped", UpdateJobRequest(priority=3), "InvalidJobStatus", 409),
        ("quota", UpdateJobRequest(priority=10), "InvalidParameter", 400),
        ("quota", UpdateJobRequest(), "MissingParameter", 400),
    ],
)
def test_it_refuses_other_updates(dlc, create_job, ws_a, make, request_, code, status):
    body = spot_job_body(ws_a) if make == "spot" else quota_job_body(ws_a)
    job_id = create_job(body)
    if make == "stopped":
        dlc.stop_job(job_id)
    with pytest.raises(Exception) as caught:
        dlc.update_job(job_id, request_)
    assert sdk_error(caught) == (code, status)


def test_update_job_changes_nothing_but_priority(raw, create_job, ws_a):
    """(UpdateJobRequest of SDK 1.4.17 cannot even carry UserCommand: sent by hand.)"""
    job_id = create_job(quota_job_body(ws_a))
    response = raw.send("PUT", f"/api/v1/jobs/{job_id}", body=b'{"UserCommand": "rm -rf /"}')
    assert response.status_code == 400
    assert response.json()["Code"] == "InvalidParameter"
    assert "UserCommand" in response.json()["Message"]
    assert Job.objects.get(job_id=job_id).user_command == "python train.py"


@pytest.mark.parametrize(
    ("body", "code", "text"),
    [
        (
            {},
            "MissingParameter",
            "Nothing to change: UpdateJob changes Priority, Description and Accessibility.",
        ),
        (
            {"Foo": 1},
            "InvalidParameter",
            "Foo: not supported here: UpdateJob changes Priority, Description and Accessibility",
        ),
    ],
)
def test_update_job_names_what_it_does_not_take(raw, create_job, ws_a, body, code, text):
    job_id = create_job(quota_job_body(ws_a))
    response = raw.send("PUT", f"/api/v1/jobs/{job_id}", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Code"]) == (400, code)
    assert response.json()["Message"] == text


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"Description": "mine now"}, "You cannot change job"),
        ({"Priority": 3}, "You cannot change the priority of job"),
    ],
)
def test_update_job_refuses_a_member_in_the_words_of_the_change(
    live_server, keys, create_job, ws_a, body, text
):
    # signed by hand: the SDK versions the PAI docs pin have no UpdateJob Description
    from tests.api.conftest import RawClient

    job_id = create_job(quota_job_body(ws_a))
    bob = RawClient(live_server.url, keys["bob"])
    response = bob.send("PUT", f"/api/v1/jobs/{job_id}", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Code"]) == (403, "Forbidden.NotJobManager")
    assert response.json()["Message"].startswith(f"{text} {job_id}:")
    assert Job.objects.get(job_id=job_id).description == ""


def test_it_returns_the_tail_of_a_pods_log(dlc, create_job, ws_a, settings, tmp_path):
    settings.POD_WORK_ROOT = tmp_path
    job_id = create_job(quota_job_body(ws_a))
    pod = Pod.objects.filter(job__job_id=job_id).select_related("job").first()
    log = pod_log_path(pod)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("epoch 1 loss 0.9\nepoch 2 loss 0.5\nepoch 3 loss 0.2\n")

    body = dlc.get_pod_logs(job_id, pod.pod_id, GetPodLogsRequest(max_lines=2)).body
    assert body.logs == ["epoch 2 loss 0.5", "epoch 3 loss 0.2"]
    body = dlc.get_pod_logs(job_id, pod.pod_id, GetPodLogsRequest()).body
    assert len(body.logs) == 3


def test_it_returns_the_lines_a_pod_wrote_within_a_time_window(
    dlc, create_job, ws_a, settings, tmp_path, monkeypatch
):
    from apps.agent import shim

    settings.POD_WORK_ROOT = tmp_path
    job_id = create_job(quota_job_body(ws_a))
    pod = Pod.objects.filter(job__job_id=job_id).select_related("job").first()
    start = timezone.now().replace(microsecond=0) - timedelta(hours=3)
    clock = [start.timestamp()]
    monkeypatch.setattr(shim.time, "time", lambda: clock[0])
    writer = shim.LogWriter(pod_log_path(pod), max_bytes=10_000)
    for hour in range(3):  # one line at the start, +1 h and +2 h
        clock[0] = start.timestamp() + 3600 * hour
        writer.write(f"hour {hour}\n".encode())
    writer.close()

    def logs(**window) -> list[str]:
        return dlc.get_pod_logs(job_id, pod.pod_id, GetPodLogsRequest(**window)).body.logs

    def at(minutes: int) -> str:
        return (start + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")

    assert logs() == ["hour 0", "hour 1", "hour 2"]  # the last 7 days until now
    assert logs(start_time=at(30)) == ["hour 1", "hour 2"]
    assert logs(start_time=at(30), end_time=at(90)) == ["hour 1"]
    assert logs(end_time=at(30), max_lines=5) == ["hour 0"]
    assert logs(start_time=at(200)) == []
    with pytest.raises(Exception) as caught:
        logs(start_time=at(90), end_time=at(30))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "StartTime" in str(caught.value)


def test_max_events_num_keeps_the_newest_events_in_time_order(dlc, create_job, ws_a):
    """MaxEventsNum caps a long history to its latest events (what happened last is what
    a user polling a job looks for), still oldest first as without it."""
    job_id = create_job(quota_job_body(ws_a))
    job = Job.objects.get(job_id=job_id)
    start = timezone.now() - timedelta(hours=1)
    for n in range(5):
        job_event(job=job, kind="Note", message=f"note {n}", now=start + timedelta(minutes=n))
    everything = dlc.get_job_events(job_id, GetJobEventsRequest()).body.events
    assert [e.split(": ", 1)[1] for e in everything[:5]] == [f"note {n}" for n in range(5)]

    newest = dlc.get_job_events(job_id, GetJobEventsRequest(max_events_num=3)).body.events
    assert newest == everything[-3:]
    window = GetJobEventsRequest(
        max_events_num=2,
        start_time=start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        end_time=(start + timedelta(minutes=3, seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    said = dlc.get_job_events(job_id, window).body.events
    assert [e.split(": ", 1)[1] for e in said] == ["note 2", "note 3"]


def test_it_lists_job_and_pod_events_and_empty_logs(dlc, create_job, ws_a, settings, tmp_path):
    settings.POD_WORK_ROOT = tmp_path  # no pod has written anything here
    job_id = create_job(quota_job_body(ws_a))
    events = dlc.get_job_events(job_id, GetJobEventsRequest()).body
    assert events.job_id == job_id
    assert [e.split(" ")[1].rstrip(":") for e in events.events][:2] == ["Submitted", "Enqueued"]
    assert all(ISO_UTC.match(e.split(" ")[0]) for e in events.events)
    limited = dlc.get_job_events(job_id, GetJobEventsRequest(max_events_num=1)).body
    assert limited.events == events.events[-1:]

    pod = dlc.get_job(job_id, GetJobRequest()).body.pods[0]
    logs = dlc.get_pod_logs(job_id, pod.pod_id, GetPodLogsRequest()).body
    assert (logs.job_id, logs.pod_id, logs.pod_uid, logs.logs) == (
        job_id,
        pod.pod_id,
        pod.pod_uid,
        [],
    )
    pod_events = dlc.get_pod_events(job_id, pod.pod_id, GetPodEventsRequest(pod_uid=pod.pod_uid))
    assert pod_events.body.pod_id == pod.pod_id and pod_events.body.events == []

    with pytest.raises(Exception) as caught:
        dlc.get_pod_logs(job_id, "no-such-pod", GetPodLogsRequest())
    assert sdk_error(caught) == ("EntityNotExist.Pod", 404)
    with pytest.raises(Exception) as caught:
        dlc.get_pod_events(job_id, pod.pod_id, GetPodEventsRequest(pod_uid="not-its-uid"))
    assert sdk_error(caught) == ("EntityNotExist.Pod", 404)


def test_a_member_manages_only_their_own_jobs_and_the_owner_all_of_them(dlc_for, create_job, ws_a):
    """bob (a member of team-a) sees alice's job but cannot stop, delete or reprioritise
    it; alice owns the workspace and may stop bob's. The console applies the same rule."""
    alice, bob = dlc_for("alice"), dlc_for("bob")
    hers = create_job(spot_job_body(ws_a), client=alice)
    his = create_job(spot_job_body(ws_a), client=bob)
    assert bob.get_job(hers, GetJobRequest()).body.job_id == hers
    for attempt in (
        lambda: bob.stop_job(hers),
        lambda: bob.delete_job(hers),
        lambda: bob.update_job(hers, UpdateJobRequest(priority=7)),
    ):
        with pytest.raises(Exception) as caught:
            attempt()
        assert sdk_error(caught) == ("Forbidden.NotJobManager", 403)
    assert Job.objects.get(job_id=hers).status != "Stopped"
    assert alice.stop_job(his).body.job_id == his
    own = create_job(spot_job_body(ws_a), client=bob)
    assert bob.stop_job(own).body.job_id == own


def test_it_runs_quota_jobs_on_a_share_of_one_gpu(dlc, create_job, ws_a):
    def half(name: str) -> dict:
        return quota_job_body(
            ws_a,
            DisplayName=name,
            JobSpecs=[
                {
                    "Type": "Worker",
                    "PodCount": 1,
                    "ResourceConfig": {"CPU": "4", "Memory": "8Gi", "GPU": "0.5"},
                }
            ],
        )

    first, second = create_job(half("half-a")), create_job(half("half-b"))
    body = dlc.get_job(first, GetJobRequest()).body
    assert body.job_specs[0].resource_config.gpu == "0.5"
    if hasattr(body, "request_gpu"):  # not in SDK 1.4.17's model; always on the wire
        assert body.request_gpu == 0.5
    pods = [Pod.objects.get(job__job_id=job_id) for job_id in (first, second)]
    assert all(p.node_id for p in pods), [(p.status, p.node_id) for p in pods]  # both placed …
    assert pods[0].node_id == pods[1].node_id and pods[0].gpu_ids == pods[1].gpu_ids != ""
    assert len(pods[0].gpu_ids.split(",")) == 1  # … sharing one GPU


def test_jobs_sorted_by_finish_time_list_unfinished_ones_last_in_either_order(
    dlc, create_job, ws_a
):
    ids = [create_job(quota_job_body(ws_a, DisplayName=f"job-{n}")) for n in range(3)]
    now = timezone.now()
    for job_id, finished in zip(ids, [now - timedelta(hours=1), now, None], strict=True):
        status = JobStatus.CREATING if finished is None else JobStatus.SUCCEEDED
        Job.objects.filter(job_id=job_id).update(status=status, finished_at=finished)

    def listed(order: str) -> list[str]:
        request = ListJobsRequest(sort_by="GmtFinishTime", order=order)
        return [j.job_id for j in dlc.list_jobs(request).body.jobs]

    assert listed("asc") == [ids[0], ids[1], ids[2]]
    assert listed("desc") == [ids[1], ids[0], ids[2]]


def test_list_jobs_reads_username_job_id_and_job_ids_as_the_sdk_documents_them(
    raw, create_job, dlc_for, ws_a
):
    """Username: "Supports fuzzy match"; JobId: "Case-insensitive"; "If both JobIds and
    JobId are specified, JobId takes precedence" (the SDK's ListJobsRequest)."""
    alices = create_job(quota_job_body(ws_a))
    bobs = create_job(spot_job_body(ws_a), client=dlc_for("bob"))

    def ids(**query) -> list[str]:
        response = raw.send("GET", "/api/v1/jobs", query=query)
        assert response.status_code == 200, response.text
        return [j["JobId"] for j in response.json()["Jobs"]]

    assert ids(Username="LIC") == [alices]
    assert ids(Username="bo") == [bobs]
    assert ids(JobId=alices.upper()) == [alices]
    assert ids(JobId=alices, JobIds=bobs) == [alices]
    assert ids(JobIds=f"{bobs},{alices}") == [bobs, alices]


def test_a_job_is_created_when_it_is_submitted(dlc, create_job, ws_a, monkeypatch):
    """GmtCreateTime, GmtSubmittedTime and the start of its first status are one moment, the
    call's: the job row was stamped when written, after the call began (GmtCreateTime read
    later than GmtSubmittedTime and than the Creating status it began in)."""
    from types import SimpleNamespace

    from apps.api import views

    began = timezone.now() - timedelta(minutes=2)  # as if the call had waited that long
    monkeypatch.setattr(views, "timezone", SimpleNamespace(now=lambda: began))
    job = dlc.get_job(create_job(quota_job_body(ws_a)), GetJobRequest()).body
    assert job.gmt_create_time == job.gmt_submitted_time == job.status_history[0].start_time
