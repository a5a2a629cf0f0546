"""The What-if pages: staff replay the cluster's own jobs (or a trace) on the current cluster
and on a changed cluster file, in the background, and compare the figures."""

from __future__ import annotations

import tomllib
from datetime import timedelta
from html import escape as html_escape
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from apps.cluster.models import Node
from apps.jobs.models import Job, JobRestart, JobRole, JobStatus, StatusTransition
from apps.scheduler.services import scheduler_cluster
from apps.simulator.cluster import cluster_from_toml
from apps.whatif.models import WhatIfRun
from apps.whatif.selectors import current_cluster, current_cluster_file, jobs_trace
from apps.whatif.services import whatif_run, whatif_sweep
from tests.web.test_jobs_views import make_job

SAMPLE = Path(settings.BASE_DIR) / "examples" / "traces"

# Twice the test cluster's dedicated GPUs: 4 nodes of 8 GPUs, team-a's guarantee doubled.
BIGGER = """
[instance_types.gpu8]
resource_type = "ECS"
vcpus = 64
memory_gib = 512
gpu = 8
gpu_model = "A100"
price_per_hour = "30.00"

[pools.ecs-dedicated]
kind = "dedicated"
resource_type = "ECS"

[[pools.ecs-dedicated.nodes]]
instance_type = "gpu8"
prefix = "gpu-"
count = 4

[quotas.root]
pool = "ecs-dedicated"
min = { gpu = 32, cpu = 256, memory_gib = 2048 }

[quotas.team-a]
parent = "root"
min = { gpu = 16, cpu = 128, memory_gib = 1024 }

[quotas.team-b]
parent = "root"
min = { gpu = 16, cpu = 128, memory_gib = 1024 }
"""


@pytest.fixture
def history(personas):
    """Six quota jobs of team-a over the last hours: each asks 4 GPUs for 30 minutes."""
    now = timezone.now()
    jobs = []
    for i in range(6):
        job = make_job(personas, status=JobStatus.SUCCEEDED, name=f"past-{i}", created=now, pods=1)
        submitted = now - timedelta(hours=6) + timedelta(minutes=5 * i)
        Job.objects.filter(pk=job.pk).update(
            submitted_at=submitted,
            started_at=submitted + timedelta(minutes=1),
            finished_at=submitted + timedelta(minutes=31),
        )
        JobRole.objects.filter(job=job).update(gpu=4, pod_count=1)
        jobs.append(job)
    return jobs


def _post(client, django_capture_on_commit_callbacks, **data):
    form = {
        "title": "twice the GPUs",
        "source": "jobs",
        "days": "7",
        "mode": "replay",
        "policies": "ours,kueue",
        "cluster_file": BIGGER,
        **data,
    }
    with django_capture_on_commit_callbacks(execute=True):
        return client.post(reverse("whatif:index"), form)


@pytest.mark.parametrize("placement", ["best_fit", "fgd"])
def test_a_replay_by_default_places_as_the_live_scheduler_does(
    admin_client, history, settings, placement, django_capture_on_commit_callbacks
):
    settings.SCHEDULER_PLACEMENT, settings.SCHEDULER_WORKLOAD_HOURS = placement, 24
    _post(admin_client, django_capture_on_commit_callbacks, policies="")
    run = WhatIfRun.objects.get()
    assert run.status == WhatIfRun.Status.DONE, run.message
    shown = [(p["policy"], p["placement"], p["workload_hours"]) for p in run.current["policies"]]
    window = 24 if placement == "fgd" else None
    assert shown == [(name, placement, window) for name in ("ours", "kueue", "random-victims")]
    _post(admin_client, django_capture_on_commit_callbacks, policies="", mode="fill")
    fill = WhatIfRun.objects.latest("pk")  # fill compares the placements themselves
    assert [p["policy"] for p in fill.current["policies"]] == [
        "ours",
        "fgd",
        "worst-fit",
        "random-fit",
    ]


def test_its_comparison_reads_delays_as_durations_and_changes_signed():
    from apps.whatif.templatetags.whatif_extras import change, figure

    assert figure(25450.2, "dur") == "7h 04m" and figure(3217, "dur") == "53m 37s"
    assert change(3217, 3273, "dur") == "+56s" and change(90061, 3661, "dur") == "−1d 0h"
    assert change(12.2, 12.6, "dur") == "±0" and change(None, 3, "dur") == "—"
    assert figure(0.7154, "pct") == "71.54%" and change(0.7154, 0.7164, "pct") == "+0.10 pp"
    assert figure(25450.2, "num") == "25,450.20" and change(66, 61, "num") == "−5"


def test_it_is_for_staff_only(alice_client, admin_client):
    assert alice_client.get(reverse("whatif:index")).status_code == 403
    page = admin_client.get(reverse("whatif:index"))
    assert page.status_code == 200 and 'id="whatif-form"' in page.content.decode()


def test_it_replays_the_clusters_own_jobs_on_both_configurations(
    admin_client, history, django_capture_on_commit_callbacks
):
    response = _post(admin_client, django_capture_on_commit_callbacks)
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response.url == reverse("whatif:detail", args=[run.pk])
    assert (run.status, run.progress, run.message) == (WhatIfRun.Status.DONE, 1.0, "")
    assert [p["policy"] for p in run.current["policies"]] == ["ours", "kueue"]
    assert run.current["capacity_gpus"] == sum(n.capacity.gpu for n in scheduler_cluster()[0])
    assert run.changed["capacity_gpus"] == 32 and run.changed["nodes"] == 4
    assert run.current["jobs"] == run.changed["jobs"] == 6

    page = admin_client.get(reverse("whatif:detail", args=[run.pk])).content.decode()
    assert 'id="comparison"' in page and 'data-policy="kueue"' in page
    assert "GPU allocation" in page and "Queueing delay p90" in page
    assert "Fragmented GPUs" in page and "fragmented_gpus" in run.current["policies"][0]
    assert "(6 jobs replayed; " in page  # what the figures stand on
    for side in ("current", "changed"):
        report = admin_client.get(reverse(f"whatif:report-{side}", args=[run.pk]))
        assert report.status_code == 200 and b"<svg" in b"".join(report.streaming_content)
    fragment = admin_client.get(
        reverse("whatif:detail", args=[run.pk]), headers={"HX-Request": "true"}
    )
    assert fragment.status_code == 286  # finished: htmx stops polling


@pytest.mark.parametrize(
    ("days", "language", "says"),
    [
        ("1", "en", "the quota jobs of the last 1 day ·"),
        ("7", "en", "the quota jobs of the last 7 days ·"),
        ("7", "zh-hans", "最近 7 天的配额任务 ·"),
    ],
)
def test_a_run_of_the_clusters_own_jobs_says_how_many_days_in_the_readers_language(
    admin_client, history, days, language, says, django_capture_on_commit_callbacks
):
    _post(admin_client, django_capture_on_commit_callbacks, days=days)
    run = WhatIfRun.objects.get()
    headers = {"Accept-Language": language}
    for url in (reverse("whatif:detail", args=[run.pk]), reverse("whatif:index")):
        page = admin_client.get(url, headers=headers).content.decode()
        assert says.removesuffix(" ·") in page, url
    page = admin_client.get(reverse("whatif:detail", args=[run.pk]), headers=headers)
    assert says in page.content.decode()


def test_the_runs_and_the_form_read_in_chinese(
    admin_client, history, django_capture_on_commit_callbacks
):
    _post(admin_client, django_capture_on_commit_callbacks)
    page = admin_client.get(reverse("whatif:index"), headers={"Accept-Language": "zh-hans"})
    runs = page.content.decode()
    runs = runs[runs.index('id="whatif-runs"') :]
    assert "<td>已完成</td>" in runs and "Done" not in runs
    assert "集群自己的任务" in page.content.decode() and "Trace 文件" in page.content.decode()


def test_it_replays_an_uploaded_trace(admin_client, personas, django_capture_on_commit_callbacks):
    trace = SimpleUploadedFile("sample_pods.csv", (SAMPLE / "sample_pods.csv").read_bytes())
    _post(admin_client, django_capture_on_commit_callbacks, source="upload", trace=trace)
    run = WhatIfRun.objects.get()
    assert run.status == WhatIfRun.Status.DONE, run.message
    assert run.trace_name == "sample_pods.csv" and run.current["jobs"] == 600


@pytest.mark.parametrize(
    "data, field, says",
    [
        ({"cluster_file": "[quotas"}, "cluster_file", "not valid TOML"),
        (
            {"cluster_file": '[quotas.a]\npool = "x"'},
            "cluster_file",
            "quotas.a.pool: unknown pool &#x27;x&#x27;",
        ),
        (
            {"cluster_file": BIGGER.replace("count = 4", "count = 1000000000")},
            "cluster_file",
            "nodes[0].count: must be ≤ 100000",
        ),
        ({"policies": "fastest"}, "policies", "unknown policy"),
        ({"policies": "ours+ckpt=inf"}, "policies", "a finite number"),  # no JSON holds it
        (
            {"mode": "fill", "policies": "fgd+workload_hours=24+name=live"},
            "policies",
            "live: workload_hours is for replay mode",
        ),
        ({"source": "upload"}, "trace", "choose a trace file"),
        (
            {"source": "upload", "trace": SimpleUploadedFile("hostname", b"vm\n")},
            "trace",
            "hostname: not a job trace (expected the openb pod list&#x27;s columns",
        ),
        (
            {"source": "upload", "trace": SimpleUploadedFile("x.csv", b"\xffname,submit_time\n")},
            "trace",
            "x.csv: not UTF-8 text (byte 0xff)",
        ),
        ({"days": "0"}, "days", "greater than or equal to 1"),
        ({"days": "3"}, "days", "no quota job was submitted in the last 3 days"),
        ({"mode": "warp"}, "mode", "Select a valid choice"),
    ],
)
def test_it_refuses_bad_input_beside_the_field(
    admin_client, data, field, says, django_capture_on_commit_callbacks
):
    response = _post(admin_client, django_capture_on_commit_callbacks, **data)
    assert response.status_code == 400
    content = response.content.decode()
    section = content[content.index(f'id="field-{field}"') :]
    assert says in section[: section.index("</div>")]
    assert not WhatIfRun.objects.exists()


def test_days_out_of_range_get_one_reason(admin_client, django_capture_on_commit_callbacks):
    response = _post(admin_client, django_capture_on_commit_callbacks, days="1000")
    content = response.content.decode()
    section = content[content.index('id="field-days"') :]
    section = section[: section.index("</div>")]
    assert "less than or equal to 90" in section
    assert "how many days" not in section  # not a second reason for the same value


def test_a_run_of_the_clusters_own_jobs_with_none_to_replay_says_so(personas):
    # the form refuses it up front; a run whose jobs all ended before they started still
    # gets here
    run = WhatIfRun.objects.create(
        created_by=personas["alice"], source="jobs", days=2, cluster_file=BIGGER
    )
    whatif_run(run_pk=run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.FAILED
    assert run.message == "no quota job of the last 2 days ran or waits: nothing to replay"


def test_a_cluster_file_it_cannot_use_fails_the_run_with_the_reason(
    admin_client, history, django_capture_on_commit_callbacks
):
    # kept from before the form checked it: the run says why it cannot use it
    run = WhatIfRun.objects.create(
        created_by=history[0].user, source="jobs", days=7, cluster_file='[quotas.a]\npool = "x"'
    )
    whatif_run(run_pk=run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.FAILED
    assert "quotas.a.pool: unknown pool 'x'" in run.message
    page = admin_client.get(reverse("whatif:detail", args=[run.pk])).content.decode()
    assert 'id="run-failed"' in page and "quotas.a.pool: unknown pool &#x27;x&#x27;" in page
    with django_capture_on_commit_callbacks(execute=True):
        again = admin_client.post(reverse("whatif:again", args=[run.pk]))
    assert again.status_code == 302
    run.refresh_from_db()
    assert run.status == WhatIfRun.Status.FAILED  # the same input fails the same way


def test_an_uploaded_trace_it_cannot_read_fails_the_run_naming_the_upload(
    admin_client, personas, django_capture_on_commit_callbacks
):
    trace = SimpleUploadedFile("mine.csv", b"name,submit_time\na,1\nb,\xff\n")
    _post(admin_client, django_capture_on_commit_callbacks, source="upload", trace=trace)
    run = WhatIfRun.objects.get()
    assert run.status == WhatIfRun.Status.FAILED
    assert run.message == "mine.csv: not UTF-8 text (byte 0xff)"  # not the server's path
    page = admin_client.get(reverse("whatif:detail", args=[run.pk])).content.decode()
    assert "mine.csv: not UTF-8 text (byte 0xff)" in page


def test_a_queued_run_polls_until_it_finishes(admin_client, history):
    run = WhatIfRun.objects.create(
        created_by=history[0].user, source="jobs", days=7, cluster_file=BIGGER
    )
    fragment = admin_client.get(
        reverse("whatif:detail", args=[run.pk]), headers={"HX-Request": "true"}
    )
    assert fragment.status_code == 200
    assert 'hx-trigger="every 2s"' in fragment.content.decode()
    assert 'id="run-progress"' in fragment.content.decode()


def test_the_clusters_own_jobs_make_a_trace(history, personas):
    now = timezone.now()
    never = make_job(personas, status=JobStatus.STOPPED, name="never-ran", created=now, pods=1)
    Job.objects.filter(pk=never.pk).update(started_at=None)
    running = make_job(personas, status=JobStatus.RUNNING, name="still-running", pods=1)
    trace = jobs_trace(days=7, now=now)
    names = [t.name for t in trace]
    assert never.job_id not in names  # stopped before it ever started: no work
    first = trace[0]
    assert (first.submit, first.duration, first.recorded_delay) == (0.0, 1800.0, 60.0)
    assert [t.submit for t in trace[:6]] == [300.0 * i for i in range(6)]
    assert (first.gpu, first.gpu_milli, first.pods, first.quota) == (4, 4000, 1, "team-a")
    assert next(t for t in trace if t.name == running.job_id).duration is None
    assert jobs_trace(days=7, now=now + timedelta(days=8)) == []


def test_a_preempted_jobs_work_is_its_running_time_less_what_it_did_again(personas):
    # ran 10 min, preempted (2 min of 4 GPUs lost), queued 20 min, ran 15 min: 23 min of
    # work, not the 45 min from its first start to its end
    start = timezone.now() - timedelta(hours=2)
    job = make_job(personas, status=JobStatus.SUCCEEDED, name="resumed", created=start, pods=1)
    JobRole.objects.filter(job=job).update(gpu=4, pod_count=1)
    minutes = [start + timedelta(minutes=m) for m in (0, 10, 30, 45)]
    Job.objects.filter(pk=job.pk).update(
        submitted_at=start, started_at=minutes[0], finished_at=minutes[3]
    )
    StatusTransition.objects.filter(job=job).delete()
    for status, begin, end in (
        ("Running", minutes[0], minutes[1]),
        ("Queuing", minutes[1], minutes[2]),
        ("Running", minutes[2], minutes[3]),
        ("Succeeded", minutes[3], None),
    ):
        StatusTransition.objects.create(job=job, status=status, started_at=begin, ended_at=end)
    JobRestart.objects.create(
        job=job, number=1, at=minutes[1], cause="JobPreempted", lost_gpu_seconds=4 * 120
    )
    [traced] = jobs_trace(days=1, now=timezone.now())
    assert traced.duration == 23 * 60
    assert traced.recorded_delay == 0.0


def test_the_current_configuration_is_the_schedulers(personas):
    nodes, quotas = scheduler_cluster()
    cluster = current_cluster()
    assert (cluster.nodes, cluster.quotas) == (nodes, quotas)
    parents = {q.parent_id for q in quotas}
    assert set(cluster.leaves) == {q.name for q in quotas if q.id not in parents}
    assert {"team-a", "team-b"} <= set(cluster.leaves) and "root-ecs" not in cluster.leaves


def test_the_form_starts_from_the_current_configuration(admin_client, personas):
    """The changed cluster file is prefilled with the current pools and quotas, and read
    back it is the same cluster the current side replays on."""
    page = admin_client.get(reverse("whatif:index"))
    assert page.status_code == 200
    text = page.context["form"]["cluster_file"].value()
    assert text == current_cluster_file()
    cluster, current = cluster_from_toml(tomllib.loads(text)), current_cluster()
    assert [n.capacity for n in cluster.nodes] == [n.capacity for n in current.nodes]
    assert cluster.node_names == current.node_names
    pools = len({n.pool_id for n in current.nodes})
    assert len({n.pool_id for n in cluster.nodes}) == pools

    def tree(c):
        by_id = {q.id: q.name for q in c.quotas}
        return {(q.name, by_id.get(q.parent_id), q.min, q.strategy) for q in c.quotas}

    assert tree(cluster) == tree(current) and set(cluster.leaves) == set(current.leaves)
    assert "[[pools.ecs-dedicated.nodes]]" in text and "count = " in text  # grouped


def test_node_groups_keep_odd_names_and_shapes_apart(personas):
    pool = Node.objects.filter(pool__kind="dedicated").first().pool
    Node.objects.create(name="gpu-07", pool=pool, cpu=1500, memory=1536, gpu=1, gpu_model="T4")
    Node.objects.create(name="odd.node", pool=pool, cpu=64000, memory=524288, gpu=8)
    text = current_cluster_file()
    assert 'gpu_model = "unknown"  # not set on the node' in text  # the file needs one
    cluster = cluster_from_toml(tomllib.loads(text))
    current = current_cluster()

    def shapes(c):
        return sorted(zip(c.node_names, (n.capacity for n in c.nodes), strict=True))

    assert shapes(cluster) == shapes(current)
    assert {"gpu-07", "odd.node"} <= set(cluster.node_names)


def test_a_run_whose_worker_died_is_queued_again_and_finishes(
    history, django_capture_on_commit_callbacks
):
    """Beat's sweep finds a run that stopped writing progress (its worker was killed) and
    queues it again; a run still writing progress is left alone, and a second delivery of
    its message does not start it twice."""
    user = history[0].user
    dead = WhatIfRun.objects.create(
        created_by=user, source="jobs", days=7, cluster_file=BIGGER, status="running"
    )
    alive = WhatIfRun.objects.create(
        created_by=user, source="jobs", days=7, cluster_file=BIGGER, status="running"
    )
    now = timezone.now()
    WhatIfRun.objects.filter(pk=dead.pk).update(updated_at=now - timedelta(minutes=6))
    WhatIfRun.objects.filter(pk=alive.pk).update(updated_at=now - timedelta(minutes=1))
    whatif_run(run_pk=alive.pk)  # the message again, while a worker has it
    assert WhatIfRun.objects.get(pk=alive.pk).current is None
    with django_capture_on_commit_callbacks(execute=True):
        assert whatif_sweep(now=now) == 1
    dead.refresh_from_db()
    assert dead.status == "done" and dead.current["policies"], dead.message
    assert WhatIfRun.objects.get(pk=alive.pk).status == "running"
    with django_capture_on_commit_callbacks(execute=True):
        assert whatif_sweep(now=now) == 0


@pytest.mark.parametrize(
    ("policies", "language", "says"),
    [
        ("", "en", "policies ours, kueue, random-victims (the mode&#x27;s default) ·"),
        ("ours,kueue+ckpt=600", "en", "policies ours, kueue+ckpt=600 ·"),
        ("", "zh-hans", "策略 ours, kueue, random-victims（该模式的默认策略） ·"),
    ],
)
def test_a_runs_page_names_the_policies_it_compares(
    admin_client, history, policies, language, says, django_capture_on_commit_callbacks
):
    """It read "policies the mode's default", though the run's summary names them."""
    _post(admin_client, django_capture_on_commit_callbacks, policies=policies)
    run = WhatIfRun.objects.get()
    assert run.status == WhatIfRun.Status.DONE, run.message
    page = admin_client.get(
        reverse("whatif:detail", args=[run.pk]), headers={"Accept-Language": language}
    )
    subtitle = page.content.decode().split('id="run-subtitle">')[1].split("</p>")[0]
    assert says in subtitle


def test_a_queued_runs_page_names_the_policies_it_will_compare(admin_client, history):
    run = WhatIfRun.objects.create(
        created_by=history[0].user, source="jobs", days=7, mode="fill", cluster_file=BIGGER
    )
    page = admin_client.get(reverse("whatif:detail", args=[run.pk])).content.decode()
    assert "policies ours, fgd, worst-fit, random-fit (the mode&#x27;s default) ·" in page


def test_an_uploaded_trace_is_kept_while_the_form_is_shown_again(
    admin_client, personas, settings, tmp_path, django_capture_on_commit_callbacks
):
    """A form refused for another field came back with its file input empty (a browser
    cannot fill one in): the trace had to be chosen again, or the run failed for its lack."""
    settings.VAR_DIR = tmp_path
    trace = SimpleUploadedFile("sample_pods.csv", (SAMPLE / "sample_pods.csv").read_bytes())
    refused = _post(
        admin_client,
        django_capture_on_commit_callbacks,
        source="upload",
        trace=trace,
        cluster_file="[quotas",
    )
    assert refused.status_code == 400
    content = refused.content.decode()
    field = content[content.index('id="field-trace"') :]
    field = field[: field.index("</div>")]
    assert "Kept from your last try: <strong>sample_pods.csv</strong>" in field
    token = refused.context["form"].kept_token
    assert f'name="kept_trace" value="{token}"' in field

    # sent again without a file: the kept one is replayed, and then let go
    again = _post(
        admin_client, django_capture_on_commit_callbacks, source="upload", kept_trace=token
    )
    run = WhatIfRun.objects.get()
    assert again.status_code == 302, again.content.decode()
    assert run.status == WhatIfRun.Status.DONE, run.message
    assert run.trace_name == "sample_pods.csv" and run.current["jobs"] == 600
    assert list((tmp_path / "whatif" / "uploads").iterdir()) == []
    assert admin_client.session["whatif_kept_traces"] == {}


def test_a_kept_trace_is_only_its_own_sessions(
    admin_client, client, personas, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.VAR_DIR = tmp_path
    trace = SimpleUploadedFile("sample_pods.csv", (SAMPLE / "sample_pods.csv").read_bytes())
    refused = _post(
        admin_client, django_capture_on_commit_callbacks, source="upload", trace=trace, days="0"
    )
    token = refused.context["form"].kept_token
    assert token
    other = personas["alice"]
    other.is_staff = True
    other.save()
    client.force_login(other)
    for sent in (token, "../../paiweb.sqlite3", ""):
        response = _post(
            client, django_capture_on_commit_callbacks, source="upload", kept_trace=sent
        )
        assert response.status_code == 400
        assert "choose a trace file" in response.content.decode()
        assert "Kept from your last try" not in response.content.decode()
    assert not WhatIfRun.objects.exists()


def test_a_bad_trace_is_not_kept(
    admin_client, personas, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.VAR_DIR = tmp_path
    bad = SimpleUploadedFile("hostname", b"vm\n")
    response = _post(
        admin_client, django_capture_on_commit_callbacks, source="upload", trace=bad, days="0"
    )
    assert response.status_code == 400
    assert "Kept from your last try" not in response.content.decode()
    assert not (tmp_path / "whatif" / "uploads").exists()


def test_a_run_sent_after_the_session_ended_comes_back_as_typed(client, personas):
    """Signed out in another tab while editing the cluster file: the sign-in brought back
    the current file, the edits lost."""
    from tests.factories import make_user

    make_user("ops", password="ops-password-1", superuser=True)
    form = {"title": "三倍 GPU", "source": "jobs", "days": "3", "mode": "replay"}
    form |= {"policies": "ours", "cluster_file": BIGGER}
    response = client.post(
        reverse("whatif:index"), form, headers={"referer": "http://testserver/whatif/"}
    )
    assert response.url == "/login/?next=/whatif/"
    client.post(response.url, {"username": "ops", "password": "ops-password-1"})

    page = client.get(reverse("whatif:index")).content.decode()
    assert 'id="unsent-form"' in page
    assert 'value="三倍 GPU"' in page and 'value="3"' in page
    assert html_escape(BIGGER) in page
    assert 'id="unsent-form"' not in client.get(reverse("whatif:index")).content.decode()
