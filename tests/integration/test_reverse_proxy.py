"""The real nginx with compose's config (deploy/nginx/paiweb.conf.template, only ports and paths
substituted) in front of the real gunicorn as compose's web service runs it: slow clients
cannot starve /healthz, nginx cuts them, and the proxy speaks https the way the settings
expect. nginx comes from `make nginx` (apt-get as root); .ci/run installs it."""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import ssl
import tempfile
from pathlib import Path
from urllib.parse import urlencode

import pytest

from benchmarks.slow_clients import Servers, attack, find_nginx

CLIENT_HEADER_TIMEOUT = 10.0  # the template's client_header_timeout
CLIENT_BODY_TIMEOUT = 10.0  # the template's client_body_timeout
SLACK = 4.0
FLOWER_LOGIN = "ops:flower-test-pw"

pytestmark = pytest.mark.redis  # the suite's Redis, not through the database fixtures


@pytest.fixture(scope="module")
def servers(_redis_for_tests):
    nginx = find_nginx()
    if nginx is None:
        pytest.fail("nginx is not installed: run `make nginx` (apt-get install nginx)")
    with tempfile.TemporaryDirectory(prefix="pw-proxy-") as tmp:
        running = Servers(Path(tmp), redis_url=_redis_for_tests)  # the login throttle's store
        try:
            running.start_gunicorn(migrate=True)
            running.start_flower(basic_auth=FLOWER_LOGIN)
            running.start_nginx(nginx)
            yield running
        finally:
            running.stop()


def _https(servers: Servers, method: str, path: str, **kwargs) -> http.client.HTTPResponse:
    connection = http.client.HTTPSConnection(
        "127.0.0.1", servers.https_port, timeout=10, context=servers.tls_context()
    )
    connection.request(method, path, **kwargs)
    response = connection.getresponse()
    response.body = response.read()
    connection.close()
    return response


def _http(port: int, path: str) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path)
    response = connection.getresponse()
    response.body = response.read()
    connection.close()
    return response


def test_it_keeps_answering_probes_while_64_slow_clients_hold_connections(servers):
    probes, slow = attack(
        port=servers.https_port,
        tls=servers.tls_context(),
        clients=64,
        seconds=CLIENT_HEADER_TIMEOUT,
        reconnect=False,
        stall_after=3,
        wait_for_cuts=CLIENT_BODY_TIMEOUT + 2 * SLACK,
    )

    assert not probes.failures, probes.summary()
    assert len(probes.latencies) >= 15, probes.summary()
    assert max(probes.latencies) < 2.0, probes.summary()

    heads = [c for c in slow if c.mode == "head"]
    bodies = [c for c in slow if c.mode == "body"]
    # A head sent a byte a second is cut client_header_timeout after its first byte.
    assert all(len(c.cuts) == 1 for c in heads), [c.cuts for c in heads]
    assert all(
        CLIENT_HEADER_TIMEOUT - 1 <= c.cuts[0] <= CLIENT_HEADER_TIMEOUT + SLACK for c in heads
    ), sorted(c.cuts[0] for c in heads)
    # A body that stalls after 3 bytes (3 s) is cut client_body_timeout later.
    assert all(len(c.cuts) == 1 for c in bodies), [c.cuts for c in bodies]
    assert all(
        CLIENT_BODY_TIMEOUT <= c.cuts[0] <= 3 + CLIENT_BODY_TIMEOUT + SLACK for c in bodies
    ), sorted(c.cuts[0] for c in bodies)
    # nginx passes on only whole requests: gunicorn saw the probes, never a slow request.
    log = (servers.workdir / "gunicorn.log").read_text(errors="replace")
    assert "GET /healthz" in log and "POST /api/v1/jobs" not in log


def test_it_redirects_http_to_https_but_answers_the_health_probe(servers):
    redirect = _http(servers.http_port, "/login/")
    assert redirect.status == 301
    assert redirect.getheader("Location") == f"https://127.0.0.1:{servers.https_port}/login/"
    assert _http(servers.http_port, "/healthz").status == 200


def test_it_serves_the_console_over_https_with_secure_cookies_and_hsts(servers):
    response = _https(servers, "GET", "/login/")
    assert response.status == 200
    assert "max-age=31536000" in response.getheader("Strict-Transport-Security", "")
    cookie = response.getheader("Set-Cookie", "")
    assert "csrftoken=" in cookie and "Secure" in cookie
    assert b"/static/css/paiweb.css" in response.body


def test_it_accepts_a_login_form_posted_over_https_on_another_port(servers):
    """The app knows the request was https (SECURE_PROXY_SSL_HEADER) and sees the host with
    its port, so the CSRF check of the Origin passes: a wrong password is a form error."""
    page = _https(servers, "GET", "/login/")
    cookie = page.getheader("Set-Cookie").split(";")[0]
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body).group(1)
    origin = f"https://127.0.0.1:{servers.https_port}"
    body = urlencode(
        {"csrfmiddlewaretoken": token.decode(), "username": "nobody", "password": "wrong"}
    )
    response = _https(
        servers,
        "POST",
        "/login/",
        body=body,
        headers={
            "Cookie": cookie,
            "Origin": origin,
            "Referer": f"{origin}/login/",
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )
    assert response.status == 200, response.body[:500]
    assert b"Please enter a correct username and password" in response.body


def test_it_serves_static_files_from_disk_and_the_rest_from_the_app(servers):
    css = _https(servers, "GET", "/static/css/paiweb.css")
    assert css.status == 200 and css.getheader("Content-Type", "").startswith("text/css")
    assert css.body == (servers.static_root / "css" / "paiweb.css").read_bytes()
    # Not in the proxy's static root (the admin's files come from the app's finders): the
    # proxy asks the app (whitenoise) instead of answering 404.
    admin_css = _https(servers, "GET", "/static/admin/css/base.css")
    assert admin_css.status == 200 and b"{" in admin_css.body


def test_it_overrides_a_forwarded_proto_the_client_sends(servers):
    """Over plain http, a client claiming https must not make the app believe it."""
    connection = http.client.HTTPConnection("127.0.0.1", servers.http_port, timeout=10)
    connection.request("GET", "/healthz", headers={"X-Forwarded-Proto": "https"})
    assert connection.getresponse().status == 200
    connection.close()
    # ...and over https a client saying "http" still gets the https app (no redirect loop).
    response = _https(servers, "GET", "/login/", headers={"X-Forwarded-Proto": "http"})
    assert response.status == 200


def test_it_refuses_bodies_over_the_limit_before_reading_them(servers):
    body = b"x" * (4 * 1024 * 1024)
    response = _https(
        servers, "POST", "/api/v1/jobs", body=body, headers={"Content-Type": "application/json"}
    )
    assert response.status == 413


def test_it_refuses_tls_for_names_the_certificate_does_not_cover(servers):
    context = servers.tls_context()
    with socket.create_connection(("127.0.0.1", servers.https_port), timeout=5) as sock:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(sock, server_hostname="paiweb.example.com")


def test_it_serves_flower_under_its_prefix_and_only_with_its_login(servers):
    assert _https(servers, "GET", "/flower/").status == 401
    assert _https(servers, "GET", "/flower/api/workers").status == 401
    login = "Basic " + base64.b64encode(FLOWER_LOGIN.encode()).decode()
    page = _https(servers, "GET", "/flower/", headers={"Authorization": login})
    assert page.status == 200 and b"/flower/static/" in page.body
    assert _https(servers, "GET", "/flower/healthcheck").body == b"OK"


def test_a_long_api_query_reaches_the_app_and_a_too_long_one_is_refused_in_json(servers):
    """gunicorn's own limit (4 KiB) answered a longer request line with an HTML page the SDKs
    could not read; now nginx's buffer (16k) is the limit, and its refusal is JSON."""
    served = _https(servers, "GET", "/api/v1/jobs?DisplayName=" + "x" * 10_000)
    assert served.status == 400  # the app's own answer: this request is not signed
    assert json.loads(served.body)["Code"] == "IncompleteSignature"
    refused = _https(servers, "GET", "/api/v1/jobs?DisplayName=" + "x" * 20_000)
    assert refused.status == 414
    assert refused.getheader("Content-Type") == "application/json"
    assert json.loads(refused.body)["Code"] == "InvalidParameter"


def test_flower_and_the_static_files_may_not_be_framed_or_sniffed(servers):
    """Flower's pages (Revoke, Shut down) were framable by any site once its login was cached
    in the browser, and the static files nginx serves lacked nosniff: the app's own headers
    never reach what it does not answer."""
    login = "Basic " + base64.b64encode(FLOWER_LOGIN.encode()).decode()
    for response in (
        _https(servers, "GET", "/flower/", headers={"Authorization": login}),
        _https(servers, "GET", "/flower/"),  # its refusal too
    ):
        assert response.getheader("X-Frame-Options") == "DENY"
        assert "frame-ancestors 'none'" in response.getheader("Content-Security-Policy", "")
        assert response.getheader("X-Content-Type-Options") == "nosniff"
    css = _https(servers, "GET", "/static/css/paiweb.css")
    assert css.status == 200 and css.getheader("X-Content-Type-Options") == "nosniff"
    assert css.getheader("Cache-Control")  # nginx's expires, kept
