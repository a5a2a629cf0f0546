"""Sign-in throttling (apps/core/auth.py over apps/core/throttle.py): per username from any
address, per address across usernames, on the console's and the admin's login forms."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.db import connection

from apps.agent.testing import database_url

LOGIN = "/login/"
ADMIN_LOGIN = "/admin/login/"
WRONG = "wrong-password"
ACCOUNT_LOCKED = "Too many failed sign-ins for this account. Try again in 15 minutes."
ADDRESS_LOCKED = "Too many failed sign-ins from your address. Try again in 15 minutes."


@pytest.fixture(autouse=True)
def _defaults(settings):
    """The shipped limits: 5 per username, 20 per address, in 15 minutes."""
    settings.THROTTLE_WINDOW_SECONDS = 900
    settings.LOGIN_THROTTLE_PER_USERNAME = 5
    settings.LOGIN_THROTTLE_PER_ADDRESS = 20
    settings.TRUSTED_PROXY_COUNT = 0


def sign_in(client, username: str, password: str, *, url: str = LOGIN, **extra):
    return client.post(url, {"username": username, "password": password}, **extra)


def fail(client, username: str = "alice", *, times: int, url: str = LOGIN, **extra):
    for _ in range(times):
        response = sign_in(client, username, WRONG, url=url, **extra)
        assert response.status_code == 200, response.status_code
    return response


def test_it_refuses_even_the_right_password_after_five_failures(client, alice, password):
    fail(client, times=5)
    response = sign_in(client, "alice", password)
    assert response.status_code == 429
    assert ACCOUNT_LOCKED in response.content.decode()
    assert 0 < int(response["Retry-After"]) <= 900
    assert "_auth_user_id" not in client.session


def test_it_does_not_check_the_password_while_locked(client, alice, password, monkeypatch):
    fail(client, times=5)
    checked = []
    original = ModelBackend.authenticate
    monkeypatch.setattr(
        ModelBackend,
        "authenticate",
        lambda self, *a, **kw: checked.append(1) or original(self, *a, **kw),
    )
    for attempt in (WRONG, password, WRONG):
        assert sign_in(client, "alice", attempt).status_code == 429
    assert checked == []


def test_it_lets_the_account_in_again_when_the_lock_expires(client, alice, password, clock):
    fail(client, times=5)
    clock.advance(minutes=10)
    for _ in range(10):  # refusals while locked do not count, nor lengthen the lock
        response = sign_in(client, "alice", WRONG)
    assert response.status_code == 429
    assert "Try again in 5 minutes." in response.content.decode()
    clock.advance(minutes=5)
    response = sign_in(client, "alice", password)
    assert response.status_code == 302 and response["Location"] == "/jobs/"


def test_a_success_resets_the_accounts_count(client, alice, password):
    fail(client, times=4)
    assert sign_in(client, "alice", password).status_code == 302
    client.logout()
    fail(client, times=4)
    assert sign_in(client, "alice", password).status_code == 302


def test_it_throttles_an_unknown_username_like_a_known_one(client, alice):
    known = fail(client, "alice", times=5)
    unknown = fail(client, "nobody", times=5)
    assert known.content.decode().count("Please enter a correct username and password") == 1
    assert unknown.content.decode().count("Please enter a correct username and password") == 1
    for username in ("alice", "nobody"):
        response = sign_in(client, username, WRONG)
        assert response.status_code == 429
        assert ACCOUNT_LOCKED in response.content.decode()


def test_it_throttles_the_admin_login(client, admin_user):
    fail(client, "admin", times=5, url=ADMIN_LOGIN)
    response = sign_in(client, "admin", "password", url=ADMIN_LOGIN)
    assert response.status_code == 429
    assert ACCOUNT_LOCKED in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_console_and_the_admin_share_an_accounts_count(client, admin_user):
    fail(client, "admin", times=3)
    fail(client, "admin", times=2, url=ADMIN_LOGIN)
    assert sign_in(client, "admin", "password").status_code == 429
    assert sign_in(client, "admin", "password", url=ADMIN_LOGIN).status_code == 429


def test_the_address_limit_spans_usernames(client, alice, password):
    here, elsewhere = {"REMOTE_ADDR": "198.51.100.7"}, {"REMOTE_ADDR": "192.0.2.80"}
    for n in range(20):
        fail(client, f"guess-{n}", times=1, **here)
    response = sign_in(client, "alice", password, **here)
    assert response.status_code == 429
    assert ADDRESS_LOCKED in response.content.decode()
    assert sign_in(client, "alice", password, **elsewhere).status_code == 302


def test_x_forwarded_for_counts_only_behind_a_trusted_proxy(client, alice, settings):
    def via_proxy(forwarded: str) -> dict[str, str]:
        return {"REMOTE_ADDR": "10.0.0.2", "HTTP_X_FORWARDED_FOR": forwarded}

    for n in range(20):
        fail(client, f"guess-{n}", times=1, **via_proxy(f"9.9.9.{n}"))
    # No trusted proxy (the default): the header is ignored, all 20 came from 10.0.0.2.
    assert sign_in(client, "bob", WRONG, **via_proxy("198.51.100.7")).status_code == 429
    settings.TRUSTED_PROXY_COUNT = 1
    # Behind one proxy the client is the right-most entry, whatever it wrote to its left.
    assert sign_in(client, "bob", WRONG, **via_proxy("10.0.0.2, 198.51.100.7")).status_code == 200
    assert sign_in(client, "bob", WRONG, **via_proxy("9.9.9.1")).status_code == 200


def test_it_counts_failures_from_every_process(client, alice, password):
    """The counts live in Redis, not in a process: two other processes (as two gunicorn
    workers would) sign in wrongly through the same backend, and this one is refused."""
    script = (
        "import sys, django\n"
        "django.setup()\n"
        "from django.conf import settings\n"
        "from django.contrib.auth import authenticate\n"
        "from django.test import RequestFactory\n"
        "settings.THROTTLE_KEY_PREFIX = sys.argv[1]\n"
        "request = RequestFactory().post('/login/', REMOTE_ADDR='203.0.113.5')\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    assert authenticate(request, username='alice', password='wrong') is None\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "paiweb.settings",
        "DEBUG": "true",
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": settings.REDIS_URL,
        "PAIWEB_VAR_DIR": tempfile.mkdtemp(prefix="pw-"),
    }
    for times in ("3", "2"):
        subprocess.run(
            [sys.executable, "-c", script, settings.THROTTLE_KEY_PREFIX, times],
            cwd=settings.BASE_DIR,
            env=env,
            check=True,
            timeout=60,
        )
    response = sign_in(client, "alice", password)
    assert response.status_code == 429
    assert ACCOUNT_LOCKED in response.content.decode()


def test_it_refuses_sign_ins_while_redis_does_not_answer(client, alice, password, monkeypatch):
    import redis

    from apps.core import auth

    def unavailable(**_):
        raise redis.ConnectionError("down")

    monkeypatch.setattr(auth, "throttle_check", unavailable)
    response = sign_in(client, "alice", password)
    assert response.status_code == 503
    assert "Sign-in is unavailable for a moment" in response.content.decode()


def test_it_says_why_in_the_readers_language(client, alice, password):
    fail(client, times=5)
    response = sign_in(client, "alice", password, headers={"accept-language": "zh-Hans"})
    assert response.status_code == 429
    assert "此账号登录失败的次数过多，请 15 分钟后再试。" in response.content.decode()
