"""The pod log views: tail, follow (htmx polling by byte offset), download, permissions."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.agent.models import PodProcess
from apps.jobs.models import Job, JobRole, JobStatus, Pod, PodStatus

FOLLOW = {"HX-Request": "true", "HX-Target": "log-follow"}


@pytest.fixture
def pod_with_log(personas, tmp_path):
    """A running pod of alice's workspace whose agent has written 50 lines so far."""
    now = timezone.now()
    job = Job.objects.create(
        workspace=personas["ws_a"],
        user=personas["alice"],
        display_name="logs",
        user_command="train",
        resource_source="quota",
        quota_id=personas["ws_a"].quotas.first().pk,
        status=JobStatus.RUNNING,
        submitted_at=now,
        status_changed_at=now,
        attempt=1,
    )
    role = JobRole.objects.create(job=job, role_type="Worker", cpu=1000, memory=1024)
    pod = Pod.objects.create(
        job=job,
        role=role,
        index=0,
        attempt=1,
        status=PodStatus.RUNNING,
        pod_id=f"{job.job_id}-worker-0-a1",
        started_at=now,
    )
    log = tmp_path / "pod.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 51)))
    process = PodProcess.objects.create(
        pod=pod, queue="node.x", state="running", log_path=str(log), queued_at=now
    )
    return pod, process, log


def url(pod: Pod) -> str:
    return reverse("pods:logs", args=[pod.pod_id])


def test_it_shows_the_last_lines(alice_client, pod_with_log):
    pod, _, _ = pod_with_log
    body = alice_client.get(url(pod), {"tail": 3}).content.decode()
    assert "line 48\nline 49\nline 50\n" in body and "line 47" not in body
    assert 'id="log-follow"' in body and "hx-get" in body  # still running: it follows
    assert reverse("pods:logs-download", args=[pod.pod_id]) in body


def test_it_gives_the_tail_as_plain_text(alice_client, pod_with_log):
    pod, _, _ = pod_with_log
    response = alice_client.get(url(pod), {"tail": 2, "format": "text"})
    assert response["Content-Type"].startswith("text/plain")
    assert response.content == b"line 49\nline 50\n"


def test_it_follows_with_only_the_new_bytes(alice_client, pod_with_log):
    pod, _, log = pod_with_log
    size = log.stat().st_size
    nothing = alice_client.get(url(pod), {"offset": size}, headers=FOLLOW)
    assert nothing.status_code == 200 and "line" not in nothing.content.decode()
    with log.open("a") as out:
        out.write("line 51\nline 5")  # the last line is not complete yet
    response = alice_client.get(url(pod), {"offset": size}, headers=FOLLOW)
    body = response.content.decode()
    assert response.status_code == 200
    assert "line 51" in body and "line 50" not in body and "line 5\n" not in body
    assert f"offset={size + len('line 51\n')}" in body  # the next poll starts after it


def test_it_stops_polling_once_the_pod_ended_and_all_is_sent(alice_client, pod_with_log):
    pod, process, log = pod_with_log
    size = log.stat().st_size
    with log.open("a") as out:
        out.write("[paiweb] exited with code 0")
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.SUCCEEDED)
    PodProcess.objects.filter(pk=process.pk).update(state="exited")
    response = alice_client.get(url(pod), {"offset": size}, headers=FOLLOW)
    assert response.status_code == 286
    body = response.content.decode()
    assert "exited with code 0" in body and "hx-get" not in body


def test_it_downloads_the_whole_log(alice_client, pod_with_log):
    pod, _, log = pod_with_log
    response = alice_client.get(reverse("pods:logs-download", args=[pod.pod_id]))
    assert response.status_code == 200
    assert f'filename="{pod.pod_id}.log"' in response["Content-Disposition"]
    assert b"".join(response.streaming_content) == log.read_bytes()


def test_it_shows_history_pods_logs_too(alice_client, pod_with_log):
    pod, _, _ = pod_with_log
    Job.objects.filter(pk=pod.job_id).update(attempt=2)  # now a history pod
    assert "line 50" in alice_client.get(url(pod)).content.decode()


def test_it_hides_logs_from_other_workspaces(client, personas, pod_with_log):
    pod, _, _ = pod_with_log
    client.force_login(personas["charlie"])
    assert client.get(url(pod)).status_code == 404
    assert client.get(url(pod), headers=FOLLOW).status_code == 404
    assert client.get(reverse("pods:logs-download", args=[pod.pod_id])).status_code == 404
    client.force_login(personas["bob"])  # a member of team-a
    assert client.get(url(pod)).status_code == 200


def test_it_asks_to_log_in(client, pod_with_log):
    pod, _, _ = pod_with_log
    response = client.get(url(pod))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_it_says_when_a_pod_has_no_output_yet(alice_client, pod_with_log):
    pod, process, log = pod_with_log
    log.unlink()
    Pod.objects.filter(pk=pod.pk).update(status=PodStatus.PENDING)
    body = alice_client.get(url(pod)).content.decode()
    assert "No output yet: the pod has not started" in body
    assert alice_client.get(reverse("pods:logs-download", args=[pod.pod_id])).status_code == 404
