"""The console in English and Simplified Chinese: the browser's Accept-Language, else the
switcher's choice (remembered per user), and catalogues that are complete."""

from __future__ import annotations

import functools
import html
import os
import re
from pathlib import Path

import polib
import pytest
from django.conf import settings
from django.urls import reverse

from apps.core.translations import extract_messages
from apps.workspaces.models import UserPreference
from tests.factories import submit_small_job

pytestmark = pytest.mark.django_db

CATALOGUE = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]|\{\w*\}")


def jobs_page(client, **headers) -> str:
    response = client.get(reverse("jobs:list"), headers=headers)
    assert response.status_code == 200
    return response.content.decode()


def test_it_speaks_english_unless_the_browser_asks_for_chinese(alice_client):
    page = jobs_page(alice_client)
    assert '<html lang="en"' in page and ">Create job</a>" in page
    page = jobs_page(alice_client, accept_language="zh-CN,zh;q=0.9,en;q=0.5")
    assert '<html lang="zh-hans"' in page
    assert ">新建任务</a>" in page and ">任务列表</a>" in page and ">资源配额</a>" in page
    assert "Create job" not in page


def test_the_job_lists_status_filter_names_statuses_as_their_badges_do(alice_client):
    """It offered "Env Preparing" and "Sanity Checking", in English in either language."""
    english = jobs_page(alice_client, accept_language="en")
    chinese = jobs_page(alice_client, accept_language="zh-CN")
    assert '<option value="EnvPreparing">EnvPreparing</option>' in english
    assert '<option value="EnvPreparing">环境准备中</option>' in chinese
    assert '<option value="SanityChecking">健康检测中</option>' in chinese
    assert "Env Preparing" not in english + chinese


def test_the_sign_in_page_follows_the_browser_and_the_cookie(client):
    page = client.get(reverse("login"), headers={"accept_language": "zh-CN"}).content.decode()
    assert '<html lang="zh-hans"' in page and "登录" in page
    response = client.post(reverse("workspaces:language"), {"language": "en", "next": "/login/"})
    assert response.status_code == 302 and response["Location"] == "/login/"
    page = client.get(reverse("login"), headers={"accept_language": "zh-CN"}).content.decode()
    assert '<html lang="en"' in page  # the switcher's cookie wins over the browser


def test_a_chosen_language_is_remembered_for_the_user(client, personas):
    alice = personas["alice"]
    client.force_login(alice)
    response = client.post(
        reverse("workspaces:language"), {"language": "zh-hans", "next": "/jobs/?status=Running"}
    )
    assert response.status_code == 302 and response["Location"] == "/jobs/?status=Running"
    assert UserPreference.objects.get(user=alice).language == "zh-hans"
    other = type(client)()  # another browser, one that prefers English, no cookie
    other.force_login(alice)
    assert '<html lang="zh-hans"' in jobs_page(other, accept_language="en-US")
    # "" follows the browser again
    client.post(reverse("workspaces:language"), {"language": ""})
    assert UserPreference.objects.get(user=alice).language == ""
    third = type(client)()
    third.force_login(alice)
    assert '<html lang="en"' in jobs_page(third, accept_language="en-US")


def test_an_unknown_language_is_refused_and_changes_nothing(client, personas):
    client.force_login(personas["alice"])
    response = client.post(reverse("workspaces:language"), {"language": "klingon"})
    assert response.status_code == 400 and "zh-hans" in response.content.decode()
    assert not UserPreference.objects.filter(user=personas["alice"], language="klingon").exists()


def test_the_switcher_goes_back_only_to_this_site(client, personas):
    client.force_login(personas["alice"])
    response = client.post(
        reverse("workspaces:language"), {"language": "en", "next": "https://evil.example/"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("jobs:list")


def test_the_preferences_page_offers_the_languages(alice_client):
    page = alice_client.get(reverse("workspaces:preferences")).content.decode()
    assert 'id="language"' in page and ">简体中文</option>" in page and ">English</option>" in page


def test_the_admin_speaks_chinese_too(admin_client):
    page = admin_client.get(reverse("admin:index"), headers={"accept_language": "zh-CN"})
    assert "站点管理" in page.content.decode()  # Django's own translation


def test_every_message_of_the_catalogue_is_translated_with_its_placeholders():
    catalogue = polib.pofile(str(CATALOGUE))
    assert len(catalogue) > 300  # the console's text, not a sample of it
    untranslated = [e.msgid for e in catalogue.untranslated_entries()]
    fuzzy = [e.msgid for e in catalogue.fuzzy_entries()]
    assert not untranslated and not fuzzy
    for entry in catalogue.translated_entries():
        assert sorted(PLACEHOLDER.findall(entry.msgid)) == sorted(
            PLACEHOLDER.findall(entry.msgstr or entry.msgstr_plural.get(0, ""))
        ), entry.msgid


def test_messages_that_differ_only_in_their_placeholders_read_alike():
    """The market's three per-minute prices once read "¥0.0013/min", "¥0.0013/分钟" and
    "¥0.0133/min" side by side: one text, three translations."""
    readings: dict[str, set[str]] = {}
    for entry in polib.pofile(str(CATALOGUE)).translated_entries():
        if not entry.msgid_plural:
            shape = PLACEHOLDER.sub("{}", entry.msgid)
            readings.setdefault(shape, set()).add(PLACEHOLDER.sub("{}", entry.msgstr))
    assert {shape: texts for shape, texts in readings.items() if len(texts) > 1} == {}


def test_the_market_in_chinese_gives_every_price_per_minute_in_its_words(client, personas):
    client.force_login(personas["alice"])
    page = client.get(reverse("market:index"), headers={"accept_language": "zh-CN"})
    text = page.content.decode()
    assert "/分钟" in text and "/min" not in text


@functools.cache
def _extracted() -> tuple[polib.POFile, polib.POFile]:
    """The catalogue, and what the extraction `make messages` runs (it drops the messages no
    code says) makes of it on the working tree; the catalogue is put back."""
    kept, stat = CATALOGUE.read_bytes(), CATALOGUE.stat()
    before = polib.pofile(str(CATALOGUE))
    try:
        extract_messages(Path(settings.BASE_DIR))
        after = polib.pofile(str(CATALOGUE))
    finally:
        CATALOGUE.write_bytes(kept)
        os.utime(CATALOGUE, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the .mo stays current
    return before, after


def _keys(catalogue: polib.POFile) -> set[tuple[str | None, str, str]]:
    return {(e.msgctxt, e.msgid, e.msgid_plural) for e in catalogue}


def test_makemessages_finds_no_text_the_catalogue_lacks():
    before, after = _extracted()
    new = [e.msgid for e in after if (e.msgctxt, e.msgid, e.msgid_plural) not in _keys(before)]
    assert not new, f"translate these in {CATALOGUE.name} (make messages): {new}"
    assert len(after) > 300


# Said by no code now, and kept: rows an earlier version wrote hold this text (a job's, its
# pods' and its events' preemption reason, a resume's event), which is translated by the
# catalogue when shown.
STORED_EARLIER = {
    "preempted by job {job} of quota {quota}, which reclaims its guaranteed resources; "
    "{lost} GPU-seconds of work since the last checkpoint lost",
    # a requeued job's resume, now said as an intent ("Resuming from …") until its load
    "Resumed from checkpoint at step {step}",
    "Resumed from the start (no checkpoint yet)",
}


# Said by Django's own admin, whose catalogue has no Chinese for it: this one gives it.
DJANGO_ADMIN = {"Filter by %(field_name)s"}


def test_the_catalogue_holds_no_message_that_nothing_says():
    before, after = _extracted()
    kept = STORED_EARLIER | DJANGO_ADMIN
    gone = sorted(m for _, m, _ in _keys(before) - _keys(after) if m not in kept)
    assert not gone, f"no code or template says these any more: {gone}"


def test_the_compiled_catalogue_is_what_django_reads(alice_client):
    assert CATALOGUE.with_suffix(".mo").stat().st_mtime >= CATALOGUE.stat().st_mtime


def test_the_pages_in_chinese_show_no_template_syntax(client, personas):
    job = submit_small_job(personas, "zh-job")
    client.force_login(personas["alice"])
    pages = [
        reverse("jobs:list"),
        reverse("jobs:create"),
        reverse("jobs:detail", args=[job.job_id]),
        reverse("scheduler:quotas"),
        reverse("market:index"),
        reverse("billing:index"),
        reverse("workspaces:preferences"),
        reverse("workspaces:access-keys"),
    ]
    for url in pages:
        response = client.get(url, headers={"accept_language": "zh-CN"})
        assert response.status_code == 200, url
        page = response.content.decode()
        assert '<html lang="zh-hans"' in page, url
        for leak in ("{%", "%}", "%(", "translate "):
            assert leak not in page, (url, leak)
    detail = client.get(pages[2], headers={"accept_language": "zh-CN"}).content.decode()
    assert f'title="{job.status}">' in detail  # the badge names the API's code as well
    assert 'title="Creating">创建中</span>' in detail


def test_a_jobs_reasons_and_events_read_in_the_readers_language(client, personas):
    """Stored once in English by the services, shown in Chinese to a reader of Chinese: the
    job's reason, its events and its pods' messages."""
    from django.utils import timezone

    from apps.jobs.services import job_stop

    job = submit_small_job(personas, "zh-stop")
    job_stop(job=job, by=personas["alice"], now=timezone.now())
    client.force_login(personas["alice"])
    url = reverse("jobs:detail", args=[job.job_id])
    english = client.get(url).content.decode()
    assert "Submitted by alice" in english and "Stopped by alice" in english
    chinese = client.get(url, headers={"accept_language": "zh-CN"}).content.decode()
    assert "由 alice 提交" in chinese and "由 alice 停止" in chinese
    assert "Submitted by alice" not in chinese and "Stopped by alice" not in chinese


def test_the_create_form_refuses_in_chinese_with_the_specs_words(alice_client):
    from tests.web.test_jobs_views import quota_form

    response = alice_client.post(
        reverse("jobs:create"),
        quota_form(**{"roles-0-gpus": "5"}),
        headers={"accept_language": "zh-CN"},
    )
    page = html.unescape(response.content.decode())
    assert "单个 Pod 需要 8 核、32 GiB、5 GPU，超过了资源池 ecs-dedicated 中任何节点的容量" in page
    assert "more than any node" not in page


@pytest.mark.parametrize("path", ["login", "workspaces:preferences", "jobs:list"])
def test_each_language_is_named_in_its_own_language_in_either(alice_client, client, path):
    """The switcher names English "English" and Chinese "简体中文" whatever the page's language:
    the sign-in page said "英语" where the header said "English"."""
    # a fresh browser for the sign-in page: alice's (the same client) goes on to the console
    reader = type(client)() if path == "login" else alice_client
    page = reader.get(reverse(path), headers={"accept_language": "zh-CN"}).content.decode()
    options = re.findall(r'<option value="(en|zh-hans)" lang="[\w-]+"[^>]*>([^<]*)</option>', page)
    assert set(options) == {("en", "English"), ("zh-hans", "简体中文")}


def test_a_quota_jobs_page_in_chinese_names_its_quota_once_and_its_pods_place(client, personas):
    from apps.jobs.models import Pod

    job = submit_small_job(personas, "zh-quota")
    job.status = "Running"
    job.save(update_fields=["status"])
    Pod.objects.filter(job=job).delete()
    for index, in_quota in enumerate((True, False)):
        Pod.objects.create(
            job=job,
            role=job.roles.first(),
            index=index,
            pod_id=f"{job.job_id}-{index}",
            status="Running",
            in_quota=in_quota,
        )
    client.force_login(personas["alice"])
    url = reverse("jobs:detail", args=[job.job_id])
    page = client.get(url, headers={"accept_language": "zh-CN"}).content.decode()
    assert "资源配额 · 资源配额" not in page
    assert re.search(r"资源配额 <strong>team-a</strong>", page)
    assert '<span title="Mixed">配额内与配额外</span>' in page
    english = client.get(url).content.decode()
    assert "Resource quota <strong>team-a</strong>" in english and "· quota" not in english
    assert '<span title="Mixed">In Quota and Not in Quota</span>' in english


def test_a_preempted_attempt_reads_in_chinese(client, personas):
    """The line under a preempted attempt's pods said "Preempted: 被作业 … 抢占"."""
    from apps.jobs.models import Pod

    job = submit_small_job(personas, "zh-preempted")
    message = (
        "preempted by job owner (dlc0000000000000a) of quota team-b, which reclaims its "
        "guaranteed resources"
    )
    Pod.objects.filter(job=job).delete()
    job.attempt = 1  # the preempted pods are an earlier attempt's
    job.save(update_fields=["attempt"])
    Pod.objects.create(
        job=job,
        role=job.roles.first(),
        index=0,
        attempt=0,
        pod_id=f"{job.job_id}-0",
        status="Preempted",
        reason="Preempted",
        message=message,
    )
    client.force_login(personas["alice"])
    url = reverse("jobs:detail", args=[job.job_id])
    page = client.get(url, headers={"accept_language": "zh-CN"}).content.decode()
    assert '<span class="mono" title="Preempted">被抢占</span>: ' in page
    assert ">Preempted</span>:" not in page
