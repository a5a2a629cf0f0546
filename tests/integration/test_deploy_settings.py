"""Production-safe defaults: DEBUG is off unless asked for, and the settings docker-compose.yml
gives its services pass `manage.py check --deploy` without a warning. The compose file is
read (and interpolated as compose does), so the test and the file cannot drift apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.ops.management.commands.demo import _debug_line
from benchmarks.slow_clients import (
    BASE_DIR,
    compose_service,
    compose_web_environment,
    interpolate,
    random_secret_key,
)

COMPOSE_SERVICES = (
    "postgres",
    "redis",
    "init",
    "web",
    "worker",
    "agent",
    "beat",
    "flower",
    "proxy",
)


def manage(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`manage.py` with exactly `env` (and PATH): no PYTEST_VERSION, so no test defaults."""
    environ = {"PATH": os.environ.get("PATH", ""), "PAIWEB_VAR_DIR": str(tmp_path), **env}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_check_deploy_with_the_environment_compose_gives_web(tmp_path):
    env = compose_web_environment(random_secret_key())
    assert env["DEBUG"] == "false"

    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
    assert "WARNING" not in result.stderr


@pytest.mark.parametrize("service", ["init", "worker", "agent", "beat", "flower"])
def test_it_gives_every_app_service_the_same_settings_as_web(service):
    web = compose_service("web", {"SECRET_KEY": "k", "FLOWER_BASIC_AUTH": "a:b"})
    other = compose_service(service, {"SECRET_KEY": "k", "FLOWER_BASIC_AUTH": "a:b"})
    assert web["environment"].items() <= other["environment"].items()


def test_it_refuses_to_start_flower_without_a_login():
    with pytest.raises(KeyError, match="FLOWER_BASIC_AUTH"):
        compose_service("flower", {"SECRET_KEY": "k"})
    flower = compose_service("flower", {"SECRET_KEY": "k", "FLOWER_BASIC_AUTH": "ops:pw"})
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == "ops:pw"
    assert "ports" not in flower  # reached through the proxy only


def test_it_publishes_only_the_proxy():
    env = {"SECRET_KEY": "k", "FLOWER_BASIC_AUTH": "a:b"}
    published = {name for name in COMPOSE_SERVICES if compose_service(name, env).get("ports")}
    assert published == {"proxy"}
    proxy = compose_service("proxy", env)
    assert "web" in proxy["depends_on"]
    template = proxy["volumes"][0].split(":")[0]
    assert (BASE_DIR / template).resolve() == BASE_DIR / "deploy/nginx/paiweb.conf.template"


COMPOSE_SERVICES = (
    "postgres",
    "redis",
    "init",
    "web",
    "worker",
    "agent",
    "beat",
    "flower",
    "proxy",
)


@pytest.mark.parametrize("service", COMPOSE_SERVICES)
def test_it_rotates_every_service_log(service):
    """Docker's default json-file log grows until the disk is full."""
    logging = compose_service(service, {"SECRET_KEY": "k", "FLOWER_BASIC_AUTH": "a:b"})["logging"]
    assert logging["driver"] == "json-file"
    options = {k: interpolate(str(v), {}) for k, v in logging["options"].items()}
    assert options == {"max-size": "50m", "max-file": "5"}
    options = {
        k: interpolate(str(v), {"LOG_MAX_SIZE": "1g"}) for k, v in logging["options"].items()
    }
    assert options["max-size"] == "1g"


def test_it_requires_a_gunicorn_that_takes_the_options_compose_gives_it():
    """--no-control-socket came with gunicorn 25.1: an older one the project allowed refused
    to start the web service ("unrecognized arguments")."""
    import tomllib

    web = compose_service("web", {"SECRET_KEY": "k", "FLOWER_BASIC_AUTH": "a:b"})
    assert "--no-control-socket" in web["command"]
    dependencies = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["project"]
    (floor,) = [d for d in dependencies["dependencies"] if d.startswith("gunicorn")]
    minimum = tuple(int(part) for part in floor.removeprefix("gunicorn>=").split("."))
    assert minimum >= (25, 1)


def test_the_images_build_step_passes_the_settings(tmp_path):
    """The Dockerfile collects the static files outside DEBUG, with a key of its own."""
    import re

    dockerfile = (BASE_DIR / "Dockerfile").read_text()
    (key,) = re.findall(r"DEBUG=false SECRET_KEY=(\S+) python manage.py collectstatic", dockerfile)
    result = manage(tmp_path, "check", env={"DEBUG": "false", "SECRET_KEY": key})
    assert result.returncode == 0, result.stderr


def test_env_example_lists_every_variable_of_the_compose_file_and_the_settings():
    import re

    listed = set(
        re.findall(r"^#?([A-Z][A-Z0-9_]*)=", (BASE_DIR / ".env.example").read_text(), re.M)
    )
    compose = set(
        re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (BASE_DIR / "docker-compose.yml").read_text())
    )
    settings = set(
        re.findall(
            r'env_(?:str|bool|int|float|list|secret)\(\s*"([A-Z0-9_]+)"',
            (BASE_DIR / "paiweb/settings.py").read_text(),
        )
    )
    assert compose - listed == set()
    assert settings - listed == set()


def test_it_turns_debug_off_when_unset(tmp_path):
    code = "from django.conf import settings; print(settings.DEBUG)"
    result = manage(
        tmp_path, "shell", "-v", "0", "-c", code, env={"SECRET_KEY": random_secret_key()}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_it_turns_debug_on_for_the_demo_when_unset(tmp_path):
    """`manage.py demo` is development: unset, DEBUG is on there (so it needs no SECRET_KEY)."""
    result = manage(tmp_path, "demo", "--help", env={})
    assert result.returncode == 0, result.stderr


def test_it_says_in_the_demo_banner_whether_debug_is_on(settings, monkeypatch):
    monkeypatch.delenv("DEBUG", raising=False)
    settings.DEBUG = True
    assert _debug_line().startswith("DEBUG=true (the demo's default)")
    monkeypatch.setenv("DEBUG", "true")
    assert _debug_line().startswith("DEBUG=true (from the environment)")
    settings.DEBUG = False
    assert _debug_line() == "DEBUG=false (from the environment)"


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_unset(tmp_path):
    result = manage(tmp_path, "check", env={})
    assert result.returncode != 0
    assert "SECRET_KEY is not set, and DEBUG is false" in result.stderr
    assert "Traceback" not in result.stderr


def test_it_shows_a_plain_404_when_debug_is_unset(tmp_path):
    code = (
        "from django.test import Client; r = Client().get('/no-such-page/'); "
        "print(r.status_code); print(r.content.decode())"
    )
    result = manage(
        tmp_path, "shell", "-v", "0", "-c", code, env={"SECRET_KEY": random_secret_key()}
    )
    assert result.returncode == 0, result.stderr
    status, _, page = result.stdout.partition("\n")
    assert status == "404"
    for leak in ("URLconf", "paiweb.urls", "Traceback", "DEBUG = True", "api/v1/"):
        assert leak not in page


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SECURE_PROXY_SSL_HEADER": "X_FORWARDED_PROTO,https"}, "SECURE_PROXY_SSL_HEADER"),
        ({"SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO"}, "SECURE_PROXY_SSL_HEADER"),
        ({"SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS: expected a number"),
        ({"SECURE_SSL_REDIRECT": "sure"}, "SECURE_SSL_REDIRECT: expected true or false"),
        ({"SESSION_COOKIE_SECURE": "2"}, "SESSION_COOKIE_SECURE: expected true or false"),
        ({"DEBUG": "maybe"}, "DEBUG: expected true or false"),
        ({"SCHEDULER_PLACEMENT": "first_fit"}, "SCHEDULER_PLACEMENT: expected best_fit or fgd"),
        ({"SCHEDULER_WORKLOAD_HOURS": "0"}, "SCHEDULER_WORKLOAD_HOURS: must be ≥ 0.01"),
        ({"HEARTBEAT_INTERVAL": "nan"}, "HEARTBEAT_INTERVAL: expected a number, got 'nan'"),
        ({"BILLING_INTERVAL": "inf"}, "BILLING_INTERVAL: expected a number, got 'inf'"),
        ({"SCHEDULER_MIN_RUN_SECONDS": "-5"}, "SCHEDULER_MIN_RUN_SECONDS: must be ≥ 0"),
        ({"POD_LOG_MAX_BYTES": "0"}, "POD_LOG_MAX_BYTES: must be ≥ 1024"),
        ({"NODE_LOST_AFTER": "8"}, "NODE_LOST_AFTER (8 s) must be at least twice"),
        (
            {"NODE_LOST_AFTER": "30", "AGENT_HEARTBEAT_INTERVAL": "20"},
            "NODE_LOST_AFTER (30 s) must be at least twice AGENT_HEARTBEAT_INTERVAL (20 s)",
        ),
        ({"LOG_LEVEL": "VERBOSE"}, "LOG_LEVEL: expected DEBUG, INFO, WARNING, ERROR or CRITICAL"),
        ({"TIME_ZONE": "Mars/Olympus"}, "TIME_ZONE: not a time zone name"),
        ({"DATABASE_URL": "postgres://u:pw@db:five/paiweb"}, "DATABASE_URL: the port is not"),
        ({"DATABASE_URL": "postgres://u:pw@db:5432"}, "DATABASE_URL: no database name"),
        ({"DATABASE_URL": "mysql://u:pw@db/paiweb"}, "DATABASE_URL: unsupported scheme 'mysql'"),
        ({"REDIS_URL": "redis:6379"}, "REDIS_URL: no host"),
        ({"REDIS_URL": "127.0.0.1:6379"}, "REDIS_URL: unsupported scheme"),
        ({"REDIS_URL": "http://redis:6379/0"}, "REDIS_URL: unsupported scheme 'http'"),
        ({"REDIS_URL": "redis://redis:port/0"}, "REDIS_URL: the port is not a number"),
        ({"REDIS_URL": "redis:///0"}, "REDIS_URL: no host"),
        ({"MARKET_REPLAY_CSV": "examples/no-such-prices.csv"}, "MARKET_REPLAY_CSV: no such file"),
    ],
)
def test_it_refuses_a_malformed_deployment_setting_at_start_up(tmp_path, env, message):
    result = manage(tmp_path, "check", env={"SECRET_KEY": random_secret_key(), **env})
    assert result.returncode != 0
    assert f"paiweb: configuration error: {message}" in result.stderr
    assert "Traceback" not in result.stderr  # the message alone, not buried under Django's frames


@pytest.mark.parametrize(
    ("command", "status"),
    [
        (["gunicorn", "paiweb.wsgi:application", "--bind=127.0.0.1:0", "--no-control-socket"], 3),
        (["celery", "-A", "paiweb", "worker"], 1),
        (["celery", "-A", "paiweb", "beat"], 1),
    ],
)
def test_every_service_stops_on_a_malformed_setting_with_its_name(tmp_path, command, status):
    """gunicorn, on status 3 ("worker failed to boot"), stops instead of booting workers
    for ever; the message names the variable, without a traceback."""
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "PAIWEB_VAR_DIR": str(tmp_path),
        "SECRET_KEY": random_secret_key(),
        "REDIS_URL": "http://redis:6379/0",
    }
    executable = Path(sys.executable).parent / command[0]
    result = subprocess.run(
        [str(executable), *command[1:]],
        cwd=BASE_DIR,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == status, result.stderr
    assert "paiweb: configuration error: REDIS_URL: unsupported scheme 'http'" in result.stderr
    assert "Traceback" not in result.stderr


def test_it_never_repeats_a_malformed_url_with_its_password(tmp_path):
    env = {"DATABASE_URL": "postgres://u:s3cret-pw@db:five/paiweb"}
    result = manage(tmp_path, "check", env={"SECRET_KEY": random_secret_key(), **env})
    assert result.returncode != 0
    assert "DATABASE_URL" in result.stderr
    assert "s3cret-pw" not in result.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"LOG_LEVEL": "debug"},
        {"TIME_ZONE": "Asia/Shanghai"},
        {"NODE_LOST_AFTER": "10", "AGENT_HEARTBEAT_INTERVAL": "5"},
        {"REDIS_URL": "rediss://:pw@redis.example.com:6380/1"},
        {"REDIS_URL": "unix:///run/redis/redis.sock"},
        {"DATABASE_URL": "postgres://paiweb:pw@postgres:5432/paiweb"},
        {"MARKET_REPLAY_CSV": "examples/spot-prices.csv"},
    ],
)
def test_it_accepts_a_well_formed_deployment_setting(tmp_path, env):
    result = manage(tmp_path, "check", env={"SECRET_KEY": random_secret_key(), **env})
    assert result.returncode == 0, result.stderr


def test_it_trusts_the_proxy_header_it_is_given(tmp_path):
    code = "from django.conf import settings; print(settings.SECURE_PROXY_SSL_HEADER)"
    result = manage(
        tmp_path,
        "shell",
        "-v",
        "0",
        "-c",
        code,
        env={
            "SECRET_KEY": random_secret_key(),
            "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
        },
    )
    assert result.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https')", result.stderr


def test_it_writes_a_self_signed_certificate_once(tmp_path):
    from cryptography import x509
    from django.core.management import call_command

    call_command("selfsigned_cert", str(tmp_path / "certs"), "--name", "paiweb.example.com")
    cert_path, key_path = tmp_path / "certs" / "cert.pem", tmp_path / "certs" / "key.pem"
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["paiweb.example.com"]
    assert key_path.stat().st_mode & 0o777 == 0o600

    before = cert_path.read_bytes()
    call_command("selfsigned_cert", str(tmp_path / "certs"))  # a real one may be there now
    assert cert_path.read_bytes() == before


@pytest.mark.parametrize("debug", ["true", "false"])
def test_a_django_warning_is_logged_once(tmp_path, debug):
    # With DEBUG on, Django's own console handler printed each django.* record, and the
    # root's handler printed it again.
    code = "import logging; logging.getLogger('django.request').warning('Forbidden: /x/')"
    result = manage(
        tmp_path, "shell", "-c", code, env={"DEBUG": debug, "SECRET_KEY": random_secret_key()}
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("Forbidden: /x/") == 1, result.stderr


def test_web_is_given_longer_to_stop_than_gunicorns_graceful_timeout():
    """On SIGTERM gunicorn lets requests in flight finish for its graceful timeout (30 s by
    default); compose's default stop grace of 10 s killed them half-way."""
    from gunicorn.config import Config

    web = compose_service("web", {"SECRET_KEY": "k", "FLOWER_BASIC_AUTH": "a:b"})
    assert web["stop_grace_period"].endswith("s")
    assert int(web["stop_grace_period"].removesuffix("s")) > Config().graceful_timeout
