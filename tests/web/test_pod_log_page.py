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
