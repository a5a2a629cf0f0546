"""The pages a user meets when something is wrong (404, a refused form, a server error) are
the console's own, in the reader's language, not Django's bare ones (tests run with DEBUG
off, as production does)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import path

pytestmark = pytest.mark.django_db


def _boom(request):
    raise RuntimeError("a bug in a view")


urlpatterns = [path("boom/", _boom)]


def test_an_unknown_page_is_the_consoles_not_found_page(alice_client):
    response = alice_client.get("/jobs/dlcnosuchjob/")

    assert response.status_code == 404
    html = response.content.decode()
    assert "css/paiweb.css" in html
    assert "Page not found" in html
    assert 'class="sidenav"' in html  # the console's frame, with its navigation
    assert "The requested resource was not found on this server" not in html


def test_the_not_found_page_reads_in_chinese(alice_client):
    response = alice_client.get("/nowhere/", headers={"accept-language": "zh-Hans"})

    assert response.status_code == 404
    assert "页面不存在" in response.content.decode()


def test_a_form_sent_without_its_token_gets_the_consoles_page(alice, password):
    client = Client(enforce_csrf_checks=True)

    response = client.post("/login/", {"username": "alice", "password": password})

    assert response.status_code == 403
    html = response.content.decode()
    assert "css/paiweb.css" in html
    assert "Form expired" in html and "nothing was changed" in html
    assert "CSRF verification failed" not in html
    assert "_auth_user_id" not in client.session


def test_a_signed_in_users_refused_form_keeps_the_console_frame(alice_client):
    alice_client.handler.enforce_csrf_checks = True

    response = alice_client.post("/workspaces/preferences/", {"time_zone": "Europe/Berlin"})

    assert response.status_code == 403
    html = response.content.decode()
    assert "Form expired" in html and 'class="sidenav"' in html


@pytest.mark.urls("tests.web.test_error_pages")
def test_a_server_error_is_the_consoles_page(client):
    client.raise_request_exception = False

    response = client.get("/boom/")

    assert response.status_code == 500
    html = response.content.decode()
    assert "css/paiweb.css" in html and "Server error" in html
    assert "<h1>Server Error (500)</h1>" not in html


def test_the_not_found_page_does_not_write_the_address_back(alice_client):
    response = alice_client.get("/jobs/dlcf00dcafe123456/")

    assert "dlcf00dcafe123456" not in response.content.decode()


def test_a_visit_to_a_forms_address_is_a_console_page(alice_client, personas):
    """GET /jobs/<id>/stop/ (typed, or bookmarked) answered 405 with a blank page."""
    from tests.web.test_jobs_views import make_job

    job = make_job(personas)

    response = alice_client.get(f"/jobs/{job.job_id}/stop/")

    assert response.status_code == 405 and response["Allow"] == "POST"
    html = response.content.decode()
    assert "Not a page" in html and "nothing was done" in html and 'class="sidenav"' in html
    job.refresh_from_db()
    assert job.status == "Running"


def test_the_api_keeps_its_own_405(alice_client):
    response = alice_client.get("/api/v1/jobs/dlcnosuchjob/stop")
    assert "Not a page" not in response.content.decode()
