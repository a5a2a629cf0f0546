"""Secrets: outside DEBUG no process starts without a real SECRET_KEY; in DEBUG an unset one
is the installation's generated key (VAR_DIR/secret-key, 0600), never the public default."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alibabacloud_aiworkspace20210204.client import Client as WorkspaceClient
from alibabacloud_aiworkspace20210204.models import ListWorkspacesRequest
from django.conf import settings

from apps.cluster.clusterfile import cluster_file_check
from apps.cluster.selectors import cluster_state
from apps.ops.management.commands.demo import demo_secrets_notice
from apps.ops.services import cluster_apply
from apps.workspaces.crypto import fernet_key
from apps.workspaces.models import AccessKey
from paiweb.secret_key import INSTALLATION_SECRET_FILE, PUBLIC_DEFAULT_SECRET_KEY
from paiweb.secret_key import installation_secret as generated
from tests.api.conftest import config

BASE_DIR = Path(settings.BASE_DIR)
DEMO = BASE_DIR / "examples" / "demo-cluster.toml"
REAL_KEY = "a-real-key-" + "k" * 50
ISOLATED = (
    "SECRET_KEY",
    "ACCESS_KEY_ENCRYPTION_SECRET",
    "DEBUG",
    "PAIWEB_VAR_DIR",
    "DATABASE_URL",
    "REDIS_URL",
)


def manage(var_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ISOLATED}
    environ.update(PAIWEB_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="paiweb.settings", **env)
    return subprocess.run(
        [sys.executable, str(BASE_DIR / "manage.py"), *args],
        env=environ,
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )


def setting(var_dir: Path, expression: str, **env: str) -> str:
    code = (
        "from django.conf import settings; from apps.workspaces.crypto import fernet_key; "
        f"print({expression})"
    )
    result = manage(var_dir, "shell", "-v", "0", "-c", code, **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SECRET_KEY is not set, and DEBUG is false"),
        ({"SECRET_KEY": ""}, "SECRET_KEY is not set, and DEBUG is false"),
        ({"SECRET_KEY": PUBLIC_DEFAULT_SECRET_KEY}, "SECRET_KEY is the public development"),
        (
            {"SECRET_KEY": REAL_KEY, "ACCESS_KEY_ENCRYPTION_SECRET": PUBLIC_DEFAULT_SECRET_KEY},
            "ACCESS_KEY_ENCRYPTION_SECRET is the public development",
        ),
        ({"SECRET_KEY": "changeme"}, "SECRET_KEY is 8 characters long, and DEBUG is false"),
        (
            {"SECRET_KEY": REAL_KEY, "ACCESS_KEY_ENCRYPTION_SECRET": "k" * 31},
            "ACCESS_KEY_ENCRYPTION_SECRET is 31 characters long",
        ),
    ],
    ids=[
        "unset",
        "empty",
        "public-default",
        "public-encryption-secret",
        "short",
        "short-encryption-secret",
    ],
)
def test_outside_debug_it_refuses_to_start_without_a_real_key(tmp_path, env, message):
    result = manage(tmp_path, "check", DEBUG="false", **env)

    assert result.returncode != 0
    assert f"paiweb: configuration error: {message}" in result.stderr
    assert "secrets.token_urlsafe" in result.stderr  # how to make one
    assert not (tmp_path / INSTALLATION_SECRET_FILE).exists()


def test_outside_debug_a_real_key_starts_and_is_used(tmp_path):
    result = manage(tmp_path, "check", DEBUG="false", SECRET_KEY=REAL_KEY)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout

    assert (
        setting(
            tmp_path,
            "settings.SECRET_KEY == settings.ACCESS_KEY_ENCRYPTION_SECRET",
            DEBUG="false",
            SECRET_KEY=REAL_KEY,
        )
        == "True"
    )
    assert not (tmp_path / INSTALLATION_SECRET_FILE).exists()


def test_in_debug_without_a_key_it_generates_one_per_installation(tmp_path):
    key_file = tmp_path / INSTALLATION_SECRET_FILE
    first = manage(tmp_path, "check", DEBUG="true")
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert len(key) >= 50 and key != PUBLIC_DEFAULT_SECRET_KEY

    second = manage(tmp_path, "check", DEBUG="true")
    assert second.returncode == 0, second.stderr
    assert key_file.read_text().strip() == key
    assert setting(tmp_path, "settings.SECRET_KEY", DEBUG="true") == key
    # The public default counts as unset.
    assert (
        setting(tmp_path, "settings.SECRET_KEY", DEBUG="true", SECRET_KEY=PUBLIC_DEFAULT_SECRET_KEY)
        == key
    )
    other_installation = tmp_path / "other"
    other_installation.mkdir()
    assert generated(other_installation) != key


def test_the_encryption_key_never_derives_from_the_public_default(tmp_path):
    derived = setting(tmp_path, "fernet_key(settings.ACCESS_KEY_ENCRYPTION_SECRET).decode()")

    assert derived != fernet_key(PUBLIC_DEFAULT_SECRET_KEY).decode()
    key = (tmp_path / INSTALLATION_SECRET_FILE).read_text().strip()
    assert derived == fernet_key(key).decode()
    explicit = setting(
        tmp_path,
        "fernet_key(settings.ACCESS_KEY_ENCRYPTION_SECRET).decode()",
        ACCESS_KEY_ENCRYPTION_SECRET="an-explicit-encryption-secret",
    )
    assert explicit == fernet_key("an-explicit-encryption-secret").decode() != derived


def test_processes_racing_to_create_the_key_agree_on_one(tmp_path):
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = set(pool.map(lambda _: generated(tmp_path), range(32)))

    assert len(keys) == 1
    assert [p.name for p in tmp_path.iterdir()] == [INSTALLATION_SECRET_FILE]


def test_a_damaged_key_file_is_refused_not_replaced(tmp_path):
    (tmp_path / INSTALLATION_SECRET_FILE).write_text("\n")

    result = manage(tmp_path, "check", DEBUG="true")
    assert result.returncode != 0 and "is empty or damaged" in result.stderr
    assert (tmp_path / INSTALLATION_SECRET_FILE).read_text() == "\n"


@pytest.mark.django_db(transaction=True)
def test_applying_the_demo_file_again_re_encrypts_under_a_new_key(settings, live_server):
    """Demo data stored under the old public key: apply_cluster re-encrypts it from the
    plaintext in the cluster file, and the SDK demo keys authenticate again."""
    demo = tomllib.loads(DEMO.read_text())
    key_id, declared = next(iter(demo["access_keys"].items()))
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

    def apply() -> object:
        declaration, errors = cluster_file_check(demo, existing=cluster_state(), environ={})
        assert errors == []
        return cluster_apply(declaration=declaration)

    settings.ACCESS_KEY_ENCRYPTION_SECRET = PUBLIC_DEFAULT_SECRET_KEY
    apply()
    settings.ACCESS_KEY_ENCRYPTION_SECRET = "this-installation-" + "s" * 40
    report = apply()

    assert report.counts["access keys"]["updated"] == len(demo["access_keys"])
    assert AccessKey.objects.get(key_id=key_id).secret() == declared["secret"]
    endpoint = live_server.url.removeprefix("http://")
    client = WorkspaceClient(config(endpoint, (key_id, declared["secret"])))
    assert client.list_workspaces(ListWorkspacesRequest()).body.total_count >= 1


def test_the_demo_banner_says_it_runs_with_demo_secrets(monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.delenv("ACCESS_KEY_ENCRYPTION_SECRET", raising=False)

    text = "\n".join(demo_secrets_notice("examples/demo-cluster.toml"))
    assert "DEMO SECRETS" in text and "not for production" in text
    assert str(Path(settings.VAR_DIR) / INSTALLATION_SECRET_FILE) in text
    assert "published in examples/demo-cluster.toml" in text

    monkeypatch.setenv("SECRET_KEY", REAL_KEY)
    assert "SECRET_KEY: from the environment" in "\n".join(demo_secrets_notice("x.toml"))
