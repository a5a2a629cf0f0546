"""The pod log page's tools: a switcher between the attempt's pods, follow and search."""

from __future__ import annotations

from django.urls import reverse

from apps.jobs.models import Pod
from tests.web.test_jobs_views import make_job


def test_it_links_the_logs_of_the_attempts_other_pods(alice_client, personas):
    job = make_job(personas, pods=3)
    pods = list(Pod.objects.filter(job=job).order_by("index"))
    assert len(pods) == 3
    page = alice_client.get(reverse("pods:logs", args=[pods[0].pod_id]) + "?tail=100")
    html = page.content.decode()
    start = html.index('id="pod-switcher"')
    switcher = html[start : html.index("</nav>", start)]
    assert 'aria-current="page"' in switcher
    for other in pods[1:]:
        assert f'href="{reverse("pods:logs", args=[other.pod_id])}?tail=100"' in switcher
    assert f'href="{reverse("pods:logs", args=[pods[0].pod_id])}' not in switcher
    assert 'id="log-follow-toggle"' in html and 'id="log-search"' in html
    assert "js/pod-logs.js" in html


def test_a_lone_pod_has_no_switcher(alice_client, personas):
    job = make_job(personas, pods=1, name="alone")
    pod = Pod.objects.get(job=job)
    html = alice_client.get(reverse("pods:logs", args=[pod.pod_id])).content.decode()
    assert 'id="pod-switcher"' not in html


def test_it_shows_when_each_line_was_written_in_the_readers_zone(
    alice_client, personas, settings, tmp_path, monkeypatch
):
    from apps.agent import shim
    from apps.agent.logs import pod_log_path

    settings.POD_WORK_ROOT = tmp_path
    job = make_job(personas, pods=1, name="timed")
    pod = Pod.objects.get(job=job)
    monkeypatch.setattr(shim.time, "time", lambda: 1_800_000_000.0)  # 08:00 UTC
    writer = shim.LogWriter(pod_log_path(pod), max_bytes=10_000)
    writer.write(b"loss 0.5\n")
    writer.close()
    alice_client.cookies["paiweb_tz"] = "Asia/Shanghai"
    url = reverse("pods:logs", args=[pod.pod_id])

    plain = alice_client.get(url).content.decode()
    assert "Show times (Asia/Shanghai)" in plain and "16:00:00" not in plain
    stamped = alice_client.get(url, {"timestamps": "1"}).content.decode()
    assert "2027-01-15 16:00:00 loss 0.5" in stamped
    assert "timestamps=1" in stamped[stamped.index('id="log-follow"') :]  # the poll keeps them
    text = alice_client.get(url, {"timestamps": "1", "format": "text"}).content.decode()
    assert text == "2027-01-15 16:00:00 loss 0.5\n"
    follow = alice_client.get(
        url,
        {"offset": 0, "timestamps": "1"},
        headers={"HX-Request": "true", "HX-Target": "log-follow"},
    ).content.decode()
    assert "2027-01-15 16:00:00 loss 0.5" in follow


def test_an_empty_log_says_so_in_one_sentence_in_chinese(
    alice_client, personas, settings, tmp_path
):
    """It read "尚无输出：Pod 尚未启动." in two pieces, with an English full stop."""
    settings.POD_WORK_ROOT = tmp_path / "pods"
    job = make_job(personas, pods=2)
    pending, running = Pod.objects.filter(job=job).order_by("index")
    Pod.objects.filter(pk=pending.pk).update(status="Pending")
    Pod.objects.filter(pk=running.pk).update(status="Running")
    zh = {"accept-language": "zh-Hans"}
    html = alice_client.get(reverse("pods:logs", args=[pending.pod_id]), headers=zh)
    assert "尚无输出：Pod 尚未启动。</p>" in html.content.decode()
    html = alice_client.get(reverse("pods:logs", args=[running.pod_id]), headers=zh)
    assert "尚无输出。</p>" in html.content.decode()


def test_the_search_count_is_in_the_readers_language(alice_client, personas, settings, tmp_path):
    """The count the search shows ("3 of 40 lines") was put together in English by the
    page's script: the script fills in the page's own words."""
    from apps.agent import shim
    from apps.agent.logs import pod_log_path

    settings.POD_WORK_ROOT = tmp_path
    pod = Pod.objects.get(job=make_job(personas, pods=1))
    writer = shim.LogWriter(pod_log_path(pod), max_bytes=10_000)
    writer.write(b"loss 0.5\n")
    writer.close()
    url = reverse("pods:logs", args=[pod.pod_id])
    html = alice_client.get(url, headers={"accept-language": "zh-Hans"}).content.decode()
    assert 'data-format="{total} 行中的 {found} 行"' in html
