"""The job list: it polls itself (204 while nothing shown changed), shows GPUs, In Quota /
Not in Quota pods and the waiting and running clocks, sorts by its columns, keeps filters
and order in the URL, and stops jobs one by one or in bulk by the managing rule."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.jobs.models import Job, JobRole, JobStatus, Pod, PodStatus, StatusTransition
from apps.jobs.services import job_submit
from apps.jobs.specs import JobSpec, RoleSpec
from apps.scheduler.services import scheduler_tick
from tests.web.test_jobs_views import make_job

POLL = {"HX-Request": "true", "HX-Target": "job-table"}


def listing(client, query=None, **headers):
    return client.get(reverse("jobs:list"), query or {}, headers=headers)


def poll(client, etag: str, query=None):
    """The table's own poll, as htmx sends it: the poll element's URL and If-None-Match."""
    return listing(client, query, **POLL, **{"If-None-Match": etag})


def names(response) -> list[str]:
    return re.findall(r'<a href="/jobs/dlc\w+/">([^<]+)</a>', response.content.decode())


def row(response, job: Job) -> str:
    """The HTML of `job`'s row."""
    content = response.content.decode()
    start = content.index(f'<tr id="job-{job.job_id}"')
    return content[start : content.index("</tr>", start)]


def cell(response, job: Job, css_class: str) -> str:
    """The text of the row's cell with `css_class`, tags dropped, spaces collapsed."""
    match = re.search(
        rf'<td class="[^"]*\b{css_class}\b[^"]*"[^>]*>(.*?)</td>', row(response, job), re.S
    )
    assert match, f"no {css_class} cell"
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", match[1]))).strip()


def poll_url(response) -> str:
    match = re.search(
        r'<span id="job-list-poll" hidden hx-get="([^"]*)"', response.content.decode()
    )
    assert match, "the table does not poll"
    return html.unescape(match[1])


def set_status(job: Job, status: str, *, at=None) -> None:
    Job.objects.filter(pk=job.pk).update(status=status, status_changed_at=at or timezone.now())


# --- polling -----------------------------------------------------------------------------


def test_it_answers_the_poll_204_while_nothing_changed(alice_client, personas):
    make_job(personas, name="steady", pods=1)
    page = listing(alice_client)
    etag = page["ETag"]
    assert page.status_code == 200 and etag.startswith('"')
    assert 'hx-trigger="every 5s"' in page.content.decode()
    assert "If-None-Match" in html.unescape(page.content.decode())
    again = poll(alice_client, etag)
    assert again.status_code == 204
    assert again.content == b""
    assert again["ETag"] == etag


def test_it_answers_the_poll_with_the_table_once_a_status_changed(alice_client, personas):
    job = make_job(personas, name="changing", pods=1)
    etag = listing(alice_client)["ETag"]
    set_status(job, JobStatus.FAILED, at=timezone.now() + timedelta(seconds=1))
    changed = poll(alice_client, etag)
    assert changed.status_code == 200
    content = changed.content.decode()
    assert content.lstrip().startswith('<div id="job-table"') and "<html" not in content
    assert 'class="badge badge-failed">Failed</span>' in content
    assert changed["ETag"] != etag
    assert poll(alice_client, changed["ETag"]).status_code == 204


def test_it_answers_the_poll_with_the_table_when_a_job_appears(alice_client, personas):
    make_job(personas, name="first")
    etag = listing(alice_client)["ETag"]
    make_job(personas, name="second")
    assert "second" in names(poll(alice_client, etag))


def test_it_answers_a_page_load_in_full_whatever_it_holds(alice_client, personas):
    make_job(personas)
    etag = listing(alice_client)["ETag"]
    assert listing(alice_client, **{"If-None-Match": etag}).status_code == 200
    assert listing(alice_client, **POLL).status_code == 200  # the filter form: no tag held


def test_it_tags_each_filter_and_order_apart(alice_client, personas):
    make_job(personas, name="only")
    tags = {
        listing(alice_client, query)["ETag"]
        for query in ({}, {"status": "Running"}, {"sort": "name"}, {"q": "only"})
    }
    assert len(tags) == 4  # the same row under another filter is another version


def test_it_polls_the_list_it_shows_with_its_filters_and_order(alice_client, personas):
    make_job(personas, name="train")
    page = listing(alice_client, {"status": "Running", "sort": "-name", "page": "1", "x": "y"})
    url = poll_url(page)
    assert url == reverse("jobs:list") + "?status=Running&sort=-name"
    assert (
        poll(alice_client, page["ETag"], {"status": "Running", "sort": "-name"}).status_code == 204
    )


def test_it_filters_on_a_status_named_in_any_case(alice_client, personas):
    """As ListJobs' Status: ?status=running filters (and shows) Running, not every job."""
    make_job(personas, name="going", status=JobStatus.RUNNING)
    make_job(personas, name="broken", status=JobStatus.FAILED)
    for value in ("Running", "running", "RUNNING"):
        page = listing(alice_client, {"status": value})
        assert names(page) == ["going"], value
        assert '<option value="Running" selected>' in page.content.decode(), value


@pytest.mark.django_db(transaction=True)
def test_it_shows_a_preempted_borrower_on_the_next_poll(client, personas, settings):
    """charlie's borrower runs on idle resources (Not in Quota); alice's team-a job takes
    them back: charlie's next poll brings the borrower back Queuing, its pods gone."""
    settings.SCHEDULER_MIN_RUN_SECONDS = 0
    settings.SCHEDULER_REQUEUE_BACKOFF_SECONDS = 0

    def submit(ws, user, quota, *, pods, idle, name):
        spec = JobSpec(
            display_name=name,
            user_command="python train.py",
            quota=quota,
            idle_mode=idle,
            enable_aimaster=True,
            roles=[RoleSpec(pod_count=pods, cpu=4000, memory=16384, gpu=4)],
        )
        return job_submit(workspace=personas[ws], user=personas[user], spec=spec)

    borrower = submit("ws_b", "charlie", "team-b", pods=4, idle="only_idle", name="borrower")
    client.force_login(personas["charlie"])
    page = listing(client)
    assert cell(page, borrower, "job-status") == "Running Not in Quota"  # and its SubStatus
    assert cell(page, borrower, "job-pods") == "0 / 4"  # In Quota / Not in Quota
    assert poll(client, page["ETag"]).status_code == 204

    submit("ws_a", "alice", "team-a", pods=1, idle="off", name="owner")
    scheduler_tick(now=timezone.now() + timedelta(seconds=1))
    preempted = poll(client, page["ETag"])
    assert preempted.status_code == 200
    assert cell(preempted, borrower, "job-status").startswith("Queuing")
    assert cell(preempted, borrower, "job-pods") == "0 / 0 of 4"


# --- columns -------------------------------------------------------------------------------


def test_it_shows_the_gpus_a_job_asks_for(alice_client, personas):
    job = make_job(personas, pods=2)
    JobRole.objects.filter(job=job).update(gpu=4)  # 2 workers × 4 GPUs
    JobRole.objects.create(job=job, role_type="Master", pod_count=1, cpu=1000, memory=1024, gpu=1)
    cpu_only = make_job(personas, name="cpu-only")
    page = listing(alice_client)
    assert cell(page, job, "job-gpus") == "9"
    assert cell(page, cpu_only, "job-gpus") == "0"


def test_it_counts_the_current_attempts_live_pods_in_and_not_in_quota(alice_client, personas):
    job = make_job(personas, idle_mode="acceptable", pods=3)
    Job.objects.filter(pk=job.pk).update(attempt=1)
    role = job.roles.get()
    Pod.objects.filter(job=job).update(attempt=0, status=PodStatus.PREEMPTED)  # history
    for i, (in_quota, status) in enumerate(
        [(True, "Running"), (False, "Running"), (False, "Pending"), (False, "Failed")]
    ):
        Pod.objects.create(
            job=job, role=role, index=i, attempt=1, pod_id=f"p{i}", in_quota=in_quota, status=status
        )
    assert cell(listing(alice_client), job, "job-pods") == "1 / 2"


def test_it_shows_public_pods_without_a_quota_split(alice_client, personas):
    job = make_job(personas, source="public", pods=2)
    Pod.objects.filter(job=job).update(in_quota=None)
    assert cell(listing(alice_client), job, "job-pods") == "2 public pool"


def test_it_shows_how_a_finished_jobs_pods_ended(alice_client, personas):
    done = make_job(personas, name="done", status=JobStatus.SUCCEEDED, pods=2)
    Pod.objects.filter(job=done).update(status=PodStatus.SUCCEEDED)
    failed = make_job(personas, name="failed", status=JobStatus.FAILED, pods=2)
    Pod.objects.filter(job=failed, index=0).update(status=PodStatus.SUCCEEDED)
    Pod.objects.filter(job=failed, index=1).update(status=PodStatus.FAILED)
    never = make_job(personas, name="never", status=JobStatus.STOPPED)
    page = listing(alice_client)
    assert cell(page, done, "job-pods") == "2 Succeeded"
    assert "0/" not in cell(page, done, "job-pods")
    assert cell(page, failed, "job-pods") == "1 Succeeded 1 Failed"
    assert cell(page, never, "job-pods") == "none started"
    chinese = html.unescape(
        alice_client.get(
            reverse("jobs:list"), headers={"accept_language": "zh-CN"}
        ).content.decode()
    )
    assert ">2 已成功</div>" in chinese and ">1 已失败</div>" in chinese  # the statuses read too


def running_job(personas, *, name="clocked", submitted, spans, started=None, status="Running"):
    """A job submitted at `submitted`, first started at `started` (the first span's start),
    that was Running during `spans` ([(start, end or None)]), Queuing in between."""
    job = make_job(personas, name=name, status=status)
    StatusTransition.objects.filter(job=job).delete()
    first = started or spans[0][0]
    Job.objects.filter(pk=job.pk).update(
        submitted_at=submitted, started_at=first, status_changed_at=spans[-1][0], finished_at=None
    )
    for start, end in spans:
        StatusTransition.objects.create(job=job, status="Running", started_at=start, ended_at=end)
        if end is not None:
            StatusTransition.objects.create(job=job, status="Queuing", started_at=end)
    return job


def test_it_shows_running_time_across_attempts_apart_from_waiting(alice_client, personas):
    now = timezone.now()
    job = running_job(
        personas,
        submitted=now - timedelta(hours=2),
        spans=[
            (now - timedelta(minutes=90), now - timedelta(minutes=60)),  # 30 min, preempted
            (now - timedelta(minutes=10), None),  # running again for 10 min
        ],
    )
    row_html = row(listing(alice_client), job)
    page = listing(alice_client)
    assert cell(page, job, "job-waiting") == "30m 00s"  # submission → first start
    running = cell(page, job, "job-running")
    assert running in ("40m 00s", "40m 01s")  # 30 + 10 minutes; the clock still runs
    assert 'class="num job-running" data-clock="2400" data-clock-live' in row_html or (
        'data-clock="2401" data-clock-live' in row_html
    )
    assert 'class="num job-waiting" data-clock="1800">' in row_html  # stopped: it started


def test_it_counts_the_wait_of_a_job_that_never_started(alice_client, personas):
    now = timezone.now()
    waiting = make_job(personas, name="waiting", status=JobStatus.QUEUING)
    Job.objects.filter(pk=waiting.pk).update(submitted_at=now - timedelta(minutes=3))
    page = listing(alice_client)
    assert cell(page, waiting, "job-waiting") in ("3m 00s", "3m 01s")
    assert (
        "data-clock-live" in re.search(r'<td class="num job-waiting"[^>]*>', row(page, waiting))[0]
    )
    assert cell(page, waiting, "job-running") == "—"


def test_it_stops_the_clocks_of_a_finished_job(alice_client, personas):
    now = timezone.now()
    job = running_job(
        personas,
        status=JobStatus.SUCCEEDED,
        submitted=now - timedelta(hours=3),
        spans=[(now - timedelta(hours=2), now - timedelta(minutes=15))],
    )
    Job.objects.filter(pk=job.pk).update(finished_at=now - timedelta(minutes=15))
    page = listing(alice_client)
    assert cell(page, job, "job-waiting") == "1h 00m"
    assert cell(page, job, "job-running") == "1h 45m"
    assert "data-clock-live" not in row(page, job)


# --- sorting and filters in the URL ---------------------------------------------------------


@pytest.fixture
def three(personas):
    """bravo (oldest, Succeeded, ran 1 h), alpha (Running 10 min), charlie (newest, Queuing)."""
    now = timezone.now()
    bravo = make_job(
        personas, name="bravo", status=JobStatus.SUCCEEDED, created=now - timedelta(hours=3)
    )
    StatusTransition.objects.filter(job=bravo).update(
        status="Running", started_at=now - timedelta(hours=2), ended_at=now - timedelta(hours=1)
    )
    alpha = make_job(personas, name="Alpha", created=now - timedelta(hours=2))
    StatusTransition.objects.filter(job=alpha).update(started_at=now - timedelta(minutes=10))
    make_job(personas, name="charlie", status=JobStatus.QUEUING, created=now - timedelta(hours=1))
    return now


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        (None, ["charlie", "Alpha", "bravo"]),  # newest first
        ("-created", ["charlie", "Alpha", "bravo"]),
        ("created", ["bravo", "Alpha", "charlie"]),
        ("name", ["Alpha", "bravo", "charlie"]),  # any case
        ("-name", ["charlie", "bravo", "Alpha"]),
        ("status", ["charlie", "Alpha", "bravo"]),  # Queuing, Running, Succeeded
        ("-status", ["bravo", "Alpha", "charlie"]),
        ("-running", ["bravo", "Alpha", "charlie"]),  # longest first, never ran last
        ("running", ["charlie", "Alpha", "bravo"]),
    ],
)
def test_it_sorts_by_a_column(alice_client, three, sort, expected):
    assert names(listing(alice_client, {"sort": sort} if sort else {})) == expected


@pytest.mark.parametrize("bad", ["nope", "-", "--name", "created;drop", "\u00e9", "9" * 40, ""])
def test_it_ignores_a_bad_order_for_the_default(alice_client, three, bad):
    response = listing(alice_client, {"sort": bad})
    assert response.status_code == 200
    assert names(response) == ["charlie", "Alpha", "bravo"]


def test_it_links_each_header_to_its_order_keeping_the_filters(alice_client, three):
    page = html.unescape(
        listing(alice_client, {"status": "Running", "sort": "name"}).content.decode()
    )
    assert 'aria-sort="ascending"' in page
    assert 'href="?status=Running&sort=-name"' in page  # the current order flips
    assert 'href="?status=Running&sort=-running"' in page  # times: longest first
    assert 'href="?status=Running&sort=status"' in page
    # the filter form sends the order along (the hidden input belongs to it)
    assert '<input type="hidden" name="sort" value="name" form="job-filters">' in page


def test_it_keeps_the_order_in_the_page_links(alice_client, personas, settings):
    settings.JOBS_PAGE_SIZE = 1
    for name in ("a", "b"):
        make_job(personas, name=name)
    page = listing(alice_client, {"sort": "name", "status": "Running"}).content.decode()
    assert 'href="?sort=name&amp;status=Running&amp;page=2"' in page
    assert names(listing(alice_client, {"sort": "name", "page": "2"})) == ["b"]


def test_it_keeps_every_filter_from_the_url_in_the_form(alice_client, personas):
    make_job(personas, name="borrower", idle_mode="acceptable")
    query = {
        "q": "borrow",
        "status": "Running",
        "payment_type": "PrePaid",
        "quota": "team-a",
        "idle_mode": "acceptable",
        "sort": "-running",
    }
    page = listing(alice_client, query)
    content = page.content.decode()
    assert names(page) == ["borrower"]
    assert 'name="q" value="borrow"' in content
    for name, value in query.items():
        if name not in ("q", "sort"):
            assert re.search(
                rf'<select name="{name}"[^>]*>.*?<option value="{value}" selected>', content, re.S
            ), name
    assert poll_url(page) == reverse("jobs:list") + (
        "?q=borrow&status=Running&payment_type=PrePaid&quota=team-a&idle_mode=acceptable&sort=-running"
    )


def test_it_leaves_a_bad_filter_out_of_the_poll(alice_client, personas):
    make_job(personas, name="kept")
    page = listing(alice_client, {"status": "Exploded", "quota": "nope", "q": "kept"})
    assert page.status_code == 200 and names(page) == ["kept"]
    assert poll_url(page) == reverse("jobs:list") + "?q=kept"


# --- Stop, one by one and in bulk -----------------------------------------------------------


@pytest.fixture
def jobs(personas):
    return {
        "alice": make_job(personas, name="alices-job", pods=1),
        "bob": make_job(personas, name="bobs-job", user="bob", pods=1),
        "charlie": make_job(personas, name="charlies-job", user="charlie", workspace="ws_b"),
    }


def stop_button(response, job: Job) -> bool:
    return reverse("jobs:stop", args=[job.job_id]) in row(response, job)


def checkbox(response, job: Job) -> bool:
    return f'name="job_ids" value="{job.job_id}"' in row(response, job)


def status_of(job: Job) -> str:
    job.refresh_from_db()
    return job.status


@pytest.mark.parametrize(
    ("persona", "may_stop"),
    [("alice", {"alice", "bob"}), ("bob", {"bob"}), ("admin", {"alice", "bob"})],
)
def test_it_offers_stop_only_for_jobs_the_user_may_manage(
    client, personas, jobs, admin_user, persona, may_stop
):
    client.force_login(admin_user if persona == "admin" else personas[persona])
    if persona == "admin":
        client.post(reverse("workspaces:switch"), {"workspace_id": personas["ws_a"].pk})
    page = listing(client)
    for owner in ("alice", "bob"):
        assert stop_button(page, jobs[owner]) is (owner in may_stop), owner
        assert checkbox(page, jobs[owner]) is (owner in may_stop), owner


def test_it_offers_no_stop_for_a_finished_job(alice_client, personas):
    done = make_job(personas, status=JobStatus.SUCCEEDED)
    page = listing(alice_client)
    assert not stop_button(page, done) and not checkbox(page, done)
    assert 'id="bulk-stop"' not in page.content.decode()


def test_it_stops_a_job_from_the_list_and_comes_back_to_it(alice_client, jobs):
    job = jobs["bob"]
    back = reverse("jobs:list") + "?status=Running&sort=name"
    response = alice_client.post(reverse("jobs:stop", args=[job.job_id]), {"next": back})
    assert response.status_code == 302 and response["Location"] == back
    assert status_of(job) == JobStatus.STOPPED


def test_it_refuses_a_stop_by_a_member_with_403(client, personas, jobs):
    client.force_login(personas["bob"])
    refused = client.post(reverse("jobs:stop", args=[jobs["alice"].job_id]), {"next": "/jobs/"})
    assert refused.status_code == 403
    assert status_of(jobs["alice"]) == JobStatus.RUNNING


def test_it_goes_back_only_to_this_site(alice_client, jobs):
    job = jobs["alice"]
    response = alice_client.post(
        reverse("jobs:stop", args=[job.job_id]), {"next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("jobs:detail", args=[job.job_id])


def bulk_stop(client, *job_ids, next_url=None):
    data = {"job_ids": list(job_ids)}
    if next_url:
        data["next"] = next_url
    return client.post(reverse("jobs:bulk-stop"), data, follow=True)


def messages_of(response) -> list[str]:
    return [
        html.unescape(m)
        for m in re.findall(r'<li class="message[^"]*">(.*?)</li>', response.content.decode(), re.S)
    ]


def test_it_stops_the_selected_jobs_as_the_owner(alice_client, jobs):
    back = reverse("jobs:list") + "?sort=name"
    response = bulk_stop(alice_client, jobs["alice"].job_id, jobs["bob"].job_id, next_url=back)
    assert response.redirect_chain == [(back, 302)]
    assert status_of(jobs["alice"]) == status_of(jobs["bob"]) == JobStatus.STOPPED
    assert messages_of(response) == [
        f"Stopped 2 jobs: alices-job ({jobs['alice'].job_id}), bobs-job ({jobs['bob'].job_id})."
    ]


def test_it_stops_a_members_own_jobs_and_reports_the_others(client, personas, jobs):
    client.force_login(personas["bob"])
    extra = make_job(personas, name="bobs-other", user="bob")
    response = bulk_stop(
        client, jobs["alice"].job_id, jobs["bob"].job_id, extra.job_id, jobs["charlie"].job_id
    )
    assert response.status_code == 200
    assert status_of(jobs["bob"]) == status_of(extra) == JobStatus.STOPPED
    assert status_of(jobs["alice"]) == JobStatus.RUNNING
    assert status_of(jobs["charlie"]) == JobStatus.RUNNING  # another workspace: not found
    said = messages_of(response)
    assert f"Stopped 2 jobs: bobs-job ({jobs['bob'].job_id}), bobs-other ({extra.job_id})." in said
    assert any(
        m.startswith(f"Refused 1 job: alices-job ({jobs['alice'].job_id}).") for m in said
    ), said
    assert "1 job not found." in said
    assert jobs["charlie"].job_id not in response.content.decode()


def test_it_lets_an_admin_stop_jobs_of_every_workspace(admin_client, jobs):
    response = bulk_stop(admin_client, *(job.job_id for job in jobs.values()))
    assert {status_of(job) for job in jobs.values()} == {JobStatus.STOPPED}
    assert messages_of(response)[0].startswith("Stopped 3 jobs:")


def test_it_refuses_every_job_to_an_outsider(client, personas, jobs):
    client.force_login(personas["charlie"])
    response = bulk_stop(client, jobs["alice"].job_id, jobs["bob"].job_id)
    assert response.status_code == 200
    assert messages_of(response) == ["2 jobs not found."]
    assert status_of(jobs["alice"]) == status_of(jobs["bob"]) == JobStatus.RUNNING


def test_it_reports_jobs_that_had_already_ended(alice_client, personas, jobs):
    done = make_job(personas, name="done", status=JobStatus.SUCCEEDED)
    stopped = make_job(personas, name="stopped", status=JobStatus.STOPPED)
    said = messages_of(bulk_stop(alice_client, done.job_id, stopped.job_id, jobs["alice"].job_id))
    assert said == [
        f"Stopped 1 job: alices-job ({jobs['alice'].job_id}).",
        f"Already ended, not stopped: done ({done.job_id}), stopped ({stopped.job_id}).",
    ]
    assert status_of(done) == JobStatus.SUCCEEDED


def test_it_asks_to_tick_jobs_first(alice_client, jobs):
    assert messages_of(bulk_stop(alice_client)) == [
        "No jobs selected: tick the jobs to stop first."
    ]


def test_it_refuses_bulk_stop_with_get(alice_client):
    assert alice_client.get(reverse("jobs:bulk-stop")).status_code == 405


def test_it_reads_the_list_in_a_fixed_number_of_queries(
    alice_client, personas, django_assert_max_num_queries
):
    for i in range(8):
        make_job(personas, name=f"job-{i}", pods=2, user="bob" if i % 2 else "alice")
    with django_assert_max_num_queries(12):
        etag = listing(alice_client)["ETag"]
    with django_assert_max_num_queries(10):
        assert poll(alice_client, etag).status_code == 204
