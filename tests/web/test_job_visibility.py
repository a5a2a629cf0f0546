"""A PRIVATE job in the console: its submitter and the workspace's administrators see it in
the list, on its page and in its logs; another member gets a 404, as for no job at all."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from apps.jobs.models import Job
from tests.web.test_jobs_views import make_job, quota_form


def _as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_private_job_shows_only_to_its_submitter_and_admins(personas):
    alice, bob = _as(personas["alice"]), _as(personas["bob"])  # ws_a's owner and a member
    hers = make_job(personas, name="hers-private", user="bob", pods=1)
    Job.objects.filter(pk=hers.pk).update(accessibility="PRIVATE")
    secret = make_job(personas, name="alice-private", pods=1)
    Job.objects.filter(pk=secret.pk).update(accessibility="PRIVATE")
    shared = make_job(personas, name="shared", pods=1)

    listed = bob.get(reverse("jobs:list")).content.decode()
    assert "shared" in listed and "hers-private" in listed and "alice-private" not in listed
    assert bob.get(reverse("jobs:detail", args=[secret.job_id])).status_code == 404
    pod = secret.pods.get()
    assert bob.get(reverse("pods:logs", args=[pod.pod_id])).status_code == 404
    assert bob.get(reverse("jobs:create") + f"?clone={secret.job_id}").status_code == 404
    page = bob.get(reverse("jobs:detail", args=[hers.job_id])).content.decode()
    assert "Private" in page  # his own

    listed = alice.get(reverse("jobs:list")).content.decode()  # the owner sees every job
    assert all(name in listed for name in ("shared", "hers-private", "alice-private"))
    assert alice.get(reverse("jobs:detail", args=[shared.job_id])).status_code == 200


def test_the_create_form_makes_a_private_job(alice_client):
    response = alice_client.post(reverse("jobs:create"), quota_form(accessibility="PRIVATE"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Job.objects.get().accessibility == "PRIVATE"
    page = alice_client.get(response["Location"]).content.decode()
    assert "Private" in page and "the workspace's administrators" in page
