"""A broker that takes connections but never answers (a Redis frozen by SIGSTOP, swapping, or
behind a network that drops packets): sending a message fails within seconds instead of
blocking its sender (a web request that stops a job, a scheduler tick) for as long as it
lasts. The message is a hint (`apps.core.tasks.hint_on_commit`), so failing is fine."""

from __future__ import annotations

import socket
import threading
import time

from celery import Celery

SENDER_WAIT = 30.0


def test_a_message_to_a_broker_that_never_answers_fails_within_seconds(tmp_path):
    path = tmp_path / "frozen.sock"
    frozen = socket.socket(socket.AF_UNIX)
    frozen.bind(str(path))
    frozen.listen(64)  # the kernel accepts; nobody ever answers
    app = Celery("frozen-broker")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = f"redis+socket://{path}"
    outcome: dict = {}

    def send() -> None:
        try:
            app.send_task("apps.agent.tasks.pod_stop_task", args=("pod", 1), queue="node.x")
            outcome["sent"] = True
        except Exception as exc:
            outcome["error"] = exc

    began = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(SENDER_WAIT)
    try:
        assert not sender.is_alive(), f"the send still blocks after {SENDER_WAIT:g} s"
        assert "error" in outcome and time.monotonic() - began < 15
    finally:
        frozen.close()
