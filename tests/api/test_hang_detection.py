"""AIMaster's hang detection through the SDK: ErrorMonitoringArgs'
--enable-job-hang-detection and --job-hang-interval set it, GetJob reports it back, and bad
values get a 400 naming the field. (A real hung job restarted by it:
tests/integration/test_agent_pods.py.)"""

from __future__ import annotations

import pytest
from alibabacloud_pai_dlc20201203.models import GetJobRequest

from apps.jobs.models import Job
from tests.api.conftest import quota_job_body, sdk_error


def _body(ws_a, args: str, aimaster: bool = True) -> dict:
    settings = {"EnableErrorMonitoringInAIMaster": aimaster, "ErrorMonitoringArgs": args}
    return quota_job_body(ws_a, Settings=settings)


def test_hang_detection_is_set_and_reported(dlc, create_job, ws_a):
    args = "--enable-job-hang-detection=True --job-hang-interval=600"
    job_id = create_job(_body(ws_a, args))
    assert Job.objects.get(job_id=job_id).hang_seconds == 600
    reported = dlc.get_job(job_id, GetJobRequest()).body.settings.error_monitoring_args
    assert "--enable-job-hang-detection=True --job-hang-interval=600" in reported

    default = create_job(_body(ws_a, "--enable-job-hang-detection=True"))
    assert Job.objects.get(job_id=default).hang_seconds == 1800  # PAI's default interval
    off = create_job(_body(ws_a, "--job-hang-interval=600"))  # an interval alone: off
    assert Job.objects.get(job_id=off).hang_seconds is None
    reported = dlc.get_job(off, GetJobRequest()).body.settings.error_monitoring_args
    assert "hang" not in reported


@pytest.mark.parametrize(
    ("args", "aimaster", "says"),
    [
        ("--enable-job-hang-detection=maybe", True, "must be True or False"),
        ("--enable-job-hang-detection=True --job-hang-interval=soon", True, "whole number"),
        ("--enable-job-hang-detection=True --job-hang-interval=5", True, "from 10 to"),
        ("--enable-job-hang-detection=True", False, "turn AIMaster on"),
    ],
)
def test_bad_hang_detection_is_refused(create_job, ws_a, args, aimaster, says):
    with pytest.raises(Exception) as caught:
        create_job(_body(ws_a, args, aimaster))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "Settings.ErrorMonitoringArgs" in str(caught.value) and says in str(caught.value)
    assert not Job.objects.exists()
