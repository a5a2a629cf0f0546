"""The JobTemplate calls of PAI-DLC 2020-12-03 through the official SDK: CreateJobTemplate,
GetJobTemplate, ListJobTemplates, UpdateJobTemplate, SetJobTemplateDefaultVersion,
DeleteJobTemplate, and CreateJob with TemplateId. The seed's pinned SDK (1.4.17) has none of
these calls: the pinned pass leaves this module's tests out (marked newer_sdk), so the
request models are looked up when a test runs, not at import."""

from __future__ import annotations

import json

import pytest
from alibabacloud_pai_dlc20201203 import models as m  # the calls are read when used

from apps.jobs.models import Job, JobTemplate
from tests.api.conftest import quota_job_body, sdk_error

pytestmark = [pytest.mark.django_db, pytest.mark.newer_sdk]


def content(ws: str, **overrides) -> str:
    body = quota_job_body(ws, **overrides)
    body.pop("WorkspaceId")
    return json.dumps(body)


def create(dlc, ws: str, name: str = "resnet", **fields) -> str:
    request = m.CreateJobTemplateRequest(
        template_name=name, workspace_id=ws, content=content(ws), **fields
    )
    return dlc.create_job_template(request).body.template_id


def test_a_template_is_created_read_and_listed(dlc, ws_a):
    made = dlc.create_job_template(
        m.CreateJobTemplateRequest(
            template_name="resnet",
            workspace_id=ws_a,
            content=content(ws_a),
            description="2 × 2 GPU",
            metadata={"team": "vision"},
        )
    ).body
    assert (made.template_name, made.version, made.default_version) == ("resnet", 1, 1)
    got = dlc.get_job_template(made.template_id, m.GetJobTemplateRequest()).body
    assert (got.template_name, got.description, got.metadata) == (
        "resnet",
        "2 × 2 GPU",
        {"team": "vision"},
    )
    assert [v.version for v in got.versions] == [1]
    body = json.loads(got.versions[0].content)
    assert body["UserCommand"] == "python train.py" and body["ResourceId"] == "team-a"
    spec = body["JobSpecs"][0]
    assert (spec["PodCount"], spec["ResourceConfig"]["GPU"]) == (2, "2")

    create(dlc, ws_a, "bert")
    listed = dlc.list_job_templates(m.ListJobTemplatesRequest(workspace_id=ws_a)).body
    assert listed.total_count == 2
    assert sorted(t.template_name for t in listed.job_templates) == ["bert", "resnet"]
    named = dlc.list_job_templates(
        m.ListJobTemplatesRequest(workspace_id=ws_a, template_name="BER", page_size=1)
    ).body
    assert [t.template_name for t in named.job_templates] == ["bert"] and named.page_size == 1


def test_a_job_is_created_from_a_template_with_its_own_fields_over_it(dlc, ws_a, create_job):
    template_id = create(dlc, ws_a)
    job_id = create_job({"TemplateId": template_id, "DisplayName": "from-template"})
    job = Job.objects.get(job_id=job_id)
    assert (job.display_name, job.user_command, job.quota.name) == (
        "from-template",
        "python train.py",
        "team-a",
    )
    role = job.roles.get()
    assert (role.pod_count, role.gpu) == (2, 2)
    detail = dlc.get_job(job_id, m.GetJobRequest()).body
    assert detail.display_name == "from-template"
    assert JobTemplate.objects.get().last_used_at is not None


@pytest.mark.parametrize("version", [0, -1, 3])
def test_create_job_from_a_version_the_template_lacks_is_refused(dlc, ws_a, create_job, version):
    """Versions count from 1: TemplateVersion 0 is no version, not "the default one"."""
    template_id = create(dlc, ws_a)
    with pytest.raises(Exception) as caught:
        create_job({"TemplateId": template_id, "TemplateVersion": version})
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert f"TemplateVersion: template 'resnet' has no version {version}" in str(caught.value)
    assert not Job.objects.exists()


def test_content_makes_new_versions_and_the_default_is_chosen(dlc, ws_a, create_job):
    template_id = create(dlc, ws_a)
    update = dlc.update_job_template(
        template_id,
        m.UpdateJobTemplateRequest(content=content(ws_a, UserCommand="python v2.py")),
    ).body
    assert (update.version, update.version_created, update.default_version) == (2, True, 1)
    job = Job.objects.get(job_id=create_job({"TemplateId": template_id}))
    assert job.user_command == "python train.py"  # still version 1 by default
    job = Job.objects.get(job_id=create_job({"TemplateId": template_id, "TemplateVersion": 2}))
    assert job.user_command == "python v2.py"

    dlc.set_job_template_default_version(
        template_id, m.SetJobTemplateDefaultVersionRequest(version=2)
    )
    got = dlc.get_job_template(template_id, m.GetJobTemplateRequest(version="all")).body
    assert got.default_version == 2 and [v.version for v in got.versions] == [1, 2]
    with pytest.raises(Exception) as caught:
        dlc.set_job_template_default_version(
            template_id, m.SetJobTemplateDefaultVersionRequest(version=3)
        )
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "Version: template 'resnet' has no version 3" in str(caught.value)
    renamed = dlc.update_job_template(
        template_id, m.UpdateJobTemplateRequest(template_name="resnet-v2", description="new")
    ).body
    assert renamed.version_created is False
    assert JobTemplate.objects.get().name == "resnet-v2"


def test_constraints_lock_and_require_fields(dlc, ws_a, create_job):
    template_id = create(
        dlc,
        ws_a,
        constraints={"$.UserCommand": "locked", "DisplayName": "required"},
    )
    with pytest.raises(Exception) as caught:
        create_job({"TemplateId": template_id, "DisplayName": "x", "UserCommand": "rm -rf /"})
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert "UserCommand: is locked by template 'resnet'" in str(caught.value)
    with pytest.raises(Exception) as caught:
        create_job({"TemplateId": template_id})
    assert "DisplayName: is required by template" in str(caught.value)
    assert Job.objects.get(job_id=create_job({"TemplateId": template_id, "DisplayName": "ok"}))


def test_bad_templates_are_refused_naming_the_field(dlc, ws_a, create_job):
    def refused(request) -> tuple[str, int, str]:
        with pytest.raises(Exception) as caught:
            dlc.create_job_template(request)
        return (*sdk_error(caught), str(caught.value))

    code, status, text = refused(
        m.CreateJobTemplateRequest(template_name="x", workspace_id=ws_a, content="{not json")
    )
    assert (code, status) == ("InvalidParameter", 400) and "Content" in text
    _, status, text = refused(
        m.CreateJobTemplateRequest(
            template_name="x", workspace_id=ws_a, content=json.dumps({"JobSpecs": "many"})
        )
    )
    assert status == 400 and "Content.JobSpecs: must be an array" in text
    _, status, text = refused(
        m.CreateJobTemplateRequest(
            template_name="x",
            workspace_id=ws_a,
            content=content(ws_a),
            constraints={"$.JobSpecs[0].PodCount": "locked"},
        )
    )
    assert status == 400 and "deeper paths are not supported" in text
    _, status, text = refused(
        m.CreateJobTemplateRequest(
            template_name="x",
            workspace_id=ws_a,
            content=content(ws_a),
            constraints={"UserCommand": "frozen"},
        )
    )
    assert status == 400 and "locked, overridable, required" in text
    create(dlc, ws_a, "taken")
    code, status, _ = refused(
        m.CreateJobTemplateRequest(template_name="taken", workspace_id=ws_a, content=content(ws_a))
    )
    assert (code, status) == ("TemplateExists", 409)
    with pytest.raises(Exception) as caught:
        create_job({"TemplateId": "999999"})
    assert sdk_error(caught) == ("EntityNotExist.JobTemplate", 404)
    assert JobTemplate.objects.count() == 1


def test_templates_follow_workspaces_and_roles(dlc, dlc_for, ws_a, personas):
    template_id = create(dlc, ws_a)  # alice owns ws_a
    charlie = dlc_for("charlie")  # in ws_b only
    with pytest.raises(Exception) as caught:
        charlie.get_job_template(template_id, m.GetJobTemplateRequest())
    assert sdk_error(caught) == ("EntityNotExist.JobTemplate", 404)
    bob = dlc_for("bob")  # a member of ws_a: sees it, may not delete or change it
    assert bob.get_job_template(template_id, m.GetJobTemplateRequest()).body.template_name
    with pytest.raises(Exception) as caught:
        bob.delete_job_template(template_id, m.DeleteJobTemplateRequest())
    assert sdk_error(caught) == ("Forbidden", 403)
    with pytest.raises(Exception) as caught:
        bob.update_job_template(template_id, m.UpdateJobTemplateRequest(description="mine"))
    assert sdk_error(caught)[1] == 403
    dlc.delete_job_template(template_id, m.DeleteJobTemplateRequest())
    assert not JobTemplate.objects.exists()


@pytest.mark.parametrize(
    ("fields", "status", "text"),
    [
        (
            {"Content": {"Foo": 1}},
            400,
            "Content.Foo: not supported here (docs/api.md lists what CreateJob takes)",
        ),
        ({"TemplateName": " "}, 400, "TemplateName: give the template a name"),
        (
            {"TemplateName": "x" * 129},
            400,
            "TemplateName: a template name has at most 128 characters",
        ),
    ],
)
def test_a_template_error_names_its_field_once(raw, ws_a, fields, status, text):
    body = {"TemplateName": "resnet", "WorkspaceId": ws_a, "Content": content(ws_a), **fields}
    response = raw.send("POST", "/api/v1/jobtemplates", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Message"]) == (status, text)
    assert not JobTemplate.objects.exists()


def test_a_field_a_template_call_does_not_take_is_refused_naming_it(raw, dlc, ws_a):
    body = {"TemplateName": "t", "WorkspaceId": ws_a, "Content": content(ws_a), "Descripton": "x"}
    response = raw.send("POST", "/api/v1/jobtemplates", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
    assert response.json()["Message"].startswith(
        "Descripton: not supported here: CreateJobTemplate takes TemplateName, WorkspaceId,"
    )
    assert not JobTemplate.objects.exists()
    template_id = create(dlc, ws_a)
    for path, fields, call in (
        (f"/api/v1/jobtemplates/{template_id}", {"Descripton": "new"}, "UpdateJobTemplate"),
        (
            f"/api/v1/jobtemplates/{template_id}/defaultversion",
            {"Version": 1, "SetAsDefault": True},
            "SetJobTemplateDefaultVersion",
        ),
    ):
        response = raw.send("PUT", path, body=json.dumps(fields).encode())
        assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
        assert f"not supported here: {call} takes" in response.json()["Message"]
    template = JobTemplate.objects.get()
    assert (template.description, template.modified_by_id) == ("", template.user_id)


def test_a_taken_template_name_is_named_too(raw, dlc, ws_a):
    create(dlc, ws_a, "resnet")
    body = json.dumps({"TemplateName": "resnet"}).encode()
    response = raw.send("PUT", f"/api/v1/jobtemplates/{create(dlc, ws_a, 'vit')}", body=body)
    assert (response.status_code, response.json()["Code"]) == (409, "TemplateExists")
    assert response.json()["Message"].startswith("TemplateName: this workspace already has")


@pytest.mark.parametrize(
    ("given", "text"),
    [
        (
            {"JobType": "Nope"},
            "Content.JobType: must be one of PyTorchJob, TFJob, MPIJob, XGBoostJob, RayJob",
        ),
        ({"JobSpecs": [{"PodCount": -5}]}, "Content.JobSpecs[0].PodCount: must be from 1 to 1000"),
        ({"Priority": 99}, "Content.Priority: must be a whole number from 1 to 9"),
        (
            {"JobSpecs": [{"EcsSpec": "ecs.nope"}]},
            "Content.JobSpecs[0].EcsSpec: unknown instance type 'ecs.nope'",
        ),
        ({"ResourceId": "team-b"}, "Content.ResourceId: no quota 'team-b' serves this workspace"),
    ],
)
def test_a_template_refuses_values_create_job_would_refuse(raw, ws_a, given, text):
    body = {"TemplateName": "t", "WorkspaceId": ws_a, "Content": given}
    response = raw.send("POST", "/api/v1/jobtemplates", body=json.dumps(body).encode())
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
    assert response.json()["Message"] == text
    assert not JobTemplate.objects.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "Content: is nested deeper than 32 levels"),
        ('{"Settings": ' + '{"a": ' * 40 + "1" + "}" * 41, "Content: is nested deeper than 32"),
        ('{"DisplayName": "a\\ud800"}', "Content.DisplayName: must be valid Unicode text"),
        ('{"Priority": ' + "9" * 5000 + "}", "Content.Priority: is a number of 5000 digits"),
    ],
    ids=["deeper-than-python-reads", "deeper-than-a-body", "lone-surrogate", "5000-digits"],
)
def test_content_in_json_text_is_checked_as_a_body_is(dlc, ws_a, text, message):
    with pytest.raises(Exception) as caught:
        dlc.create_job_template(
            m.CreateJobTemplateRequest(template_name="t", workspace_id=ws_a, content=text)
        )
    assert sdk_error(caught) == ("InvalidParameter", 400)
    assert message in str(caught.value)
    assert not JobTemplate.objects.exists()


def test_a_template_may_leave_out_what_the_job_gives(raw, ws_a, create_job):
    """No name, command or resource source: the job created from it gives them."""
    partial = {"JobType": "TFJob", "Priority": 5, "JobSpecs": [{"Type": "PS", "PodCount": 2}]}
    body = {"TemplateName": "t", "WorkspaceId": ws_a, "Content": partial}
    response = raw.send("POST", "/api/v1/jobtemplates", body=json.dumps(body).encode())
    assert response.status_code == 200, response.json()
    template_id = response.json()["TemplateId"]
    bad = json.dumps({"Content": {"Priority": 0}}).encode()
    response = raw.send("PUT", f"/api/v1/jobtemplates/{template_id}", body=bad)
    assert response.json()["Message"] == "Content.Priority: must be a whole number from 1 to 9"
    job = quota_job_body(ws_a)
    job["JobSpecs"][0]["Type"] = "PS"
    job_id = create_job({"TemplateId": template_id, **job, "JobType": ""})
    assert Job.objects.get(job_id=job_id).job_type == "TFJob"
