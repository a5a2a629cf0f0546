"""Tags through the SDK: CreateJob's Settings.Tags are kept and reported by GetJob and
ListJobs, ListJobs' Tags filter lists the jobs carrying every tag asked for, and bad tags get
a 400 naming the field."""

from __future__ import annotations

import pytest
from alibabacloud_pai_dlc20201203.models import GetJobRequest, ListJobsRequest

from apps.jobs.models import Job
from tests.api.conftest import sdk_error, spot_job_body


def _tagged(ws_a, tags: dict, **overrides) -> dict:
    return spot_job_body(ws_a, Settings={"Tags": tags}, **overrides)


def test_tags_are_kept_reported_and_filtered(dlc, create_job, ws_a):
    vision = create_job(_tagged(ws_a, {"team": "vision", "run": "7"}, DisplayName="vision"))
    speech = create_job(_tagged(ws_a, {"team": "speech", "1": "numeric key"}))
    plain = create_job(spot_job_body(ws_a))
    assert dict(Job.objects.get(job_id=vision).tags.values_list("key", "value")) == {
        "team": "vision",
        "run": "7",
    }
    assert dlc.get_job(vision, GetJobRequest()).body.settings.tags == {
        "run": "7",
        "team": "vision",
    }
    assert dlc.get_job(plain, GetJobRequest()).body.settings.tags is None

    listed = {j.job_id: j for j in dlc.list_jobs(ListJobsRequest(workspace_id=ws_a)).body.jobs}
    assert set(listed) == {vision, speech, plain}
    assert listed[speech].settings.tags == {"team": "speech", "1": "numeric key"}

    if hasattr(ListJobsRequest(), "tags"):  # not in SDK 1.4.17's model
        assert listed_by_tags(dlc, ws_a, {"team": "vision"}) == {vision}
        assert listed_by_tags(dlc, ws_a, {"team": "vision", "run": "7"}) == {vision}
        assert listed_by_tags(dlc, ws_a, {"team": "vision", "run": "8"}) == set()  # every tag
        assert listed_by_tags(dlc, ws_a, {"1": "numeric key"}) == {speech}
        assert listed_by_tags(dlc, ws_a, {"team": "Vision"}) == set()  # values match exactly


def listed_by_tags(dlc, ws_a, tags: dict) -> set[str]:
    return {
        j.job_id for j in dlc.list_jobs(ListJobsRequest(workspace_id=ws_a, tags=tags)).body.jobs
    }


@pytest.mark.parametrize(
    ("tags", "says"),
    [
        ({"aliyun:owner": "x"}, "reserved"),
        ({"": "x"}, "non-empty"),
        ({"k": 3}, "must be a string"),
        ({"k": "v" * 129}, "at most 128"),
        ({f"k{i}": "v" for i in range(21)}, "at most 20 tags"),
        ({"k": "line\nbreak"}, "control characters"),
        ({"k": "right\u202eto left"}, "control characters"),
    ],
)
def test_bad_tags_are_refused_naming_the_field(create_job, ws_a, tags, says):
    with pytest.raises(Exception) as caught:
        create_job(_tagged(ws_a, tags))
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "Settings.Tags" in str(caught.value) and says in str(caught.value)
    assert not Job.objects.exists()


def test_a_bad_tags_filter_is_refused(raw):
    for tags, says in (
        ("not json", "JSON object"),
        ('{"acs:x": "y"}', "reserved"),
        ("[" * 2000 + "]" * 2000, "Tags: is nested deeper than 32 levels"),  # was a 500
        ('{"team": "\\ud800"}', "Tags.team: must be valid Unicode text"),  # was a 500
    ):
        response = raw.send("GET", "/api/v1/jobs", query={"Tags": tags})
        assert response.status_code == 400, response.text
        body = response.json()
        assert body["Code"] == "InvalidParameter"
        assert "Tags" in body["Message"] and says in body["Message"]
