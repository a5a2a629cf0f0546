"""The create-job rule on roles (`apps.jobs.specs`): each job type has roles of its own, and a
spec naming another is refused at the role's field. No database: a public job whose roles
name no instance type is checked without one."""

from __future__ import annotations

import itertools

import pytest

from apps.core.errors import ValidationFailed
from apps.jobs.models import JobRole, JobType
from apps.jobs.specs import JOB_ROLE_TYPES, JobSpec, RoleSpec, job_spec_resolve


def role_type_errors(job_type: str, *role_types: str) -> dict[str, list[str]]:
    """The role-type errors of a job of `job_type` with one role of each of `role_types`."""
    spec = JobSpec(
        display_name="roles",
        job_type=job_type,
        user_command="true",
        resource_source="public",
        roles=[RoleSpec(role_type=role_type) for role_type in role_types],
    )
    with pytest.raises(ValidationFailed) as failed:  # a public job needs an instance type
        job_spec_resolve(spec, workspace=None)
    errors = failed.value.errors
    return {path: messages for path, messages in errors.items() if path.endswith(".role_type")}


def test_it_gives_every_job_type_its_roles_and_every_role_a_job_type():
    assert set(JOB_ROLE_TYPES) == set(JobType.values)
    assert set(itertools.chain(*JOB_ROLE_TYPES.values())) == set(JobRole.RoleType.values)
    # a JobSpec without a Type is a Worker (the API's default): every job type has one
    assert all("Worker" in roles for roles in JOB_ROLE_TYPES.values())


@pytest.mark.parametrize(("job_type", "roles"), JOB_ROLE_TYPES.items())
def test_it_takes_every_role_of_the_job_type(job_type, roles):
    assert role_type_errors(job_type, *roles) == {}


@pytest.mark.parametrize(
    ("job_type", "role_type"),
    [
        (job_type, role_type)
        for job_type, roles in JOB_ROLE_TYPES.items()
        for role_type in JobRole.RoleType.values
        if role_type not in roles
    ],
)
def test_it_refuses_a_role_the_job_type_does_not_have(job_type, role_type):
    errors = role_type_errors(job_type, "Worker", role_type)
    assert list(errors) == ["roles[1].role_type"]
    assert errors["roles[1].role_type"] == [
        f"{job_type} has no {role_type} role; its roles are {', '.join(JOB_ROLE_TYPES[job_type])}"
    ]


def test_it_says_which_roles_a_tfjob_has():
    message = "TFJob has no Master role; its roles are Worker, PS, Chief, Evaluator"
    assert role_type_errors("TFJob", "Master") == {"roles[0].role_type": [message]}


def test_it_leaves_the_roles_of_an_unknown_job_type_to_the_job_type_error():
    spec = JobSpec(
        display_name="roles",
        job_type="SparkJob",
        user_command="true",
        resource_source="public",
        roles=[RoleSpec(role_type="Driver"), RoleSpec(role_type="Master")],
    )
    with pytest.raises(ValidationFailed) as failed:
        job_spec_resolve(spec, workspace=None)
    errors = failed.value.errors
    assert errors["job_type"] == [f"must be one of {', '.join(JobType.values)}"]
    assert errors["roles[0].role_type"] == [f"must be one of {', '.join(JobRole.RoleType.values)}"]
    assert "roles[1].role_type" not in errors


def pod_count_errors(job_type: str, *roles: tuple[str, int]) -> dict[str, list[str]]:
    """The pod-count errors of a job of `job_type` with these (role, pods)."""
    spec = JobSpec(
        display_name="roles",
        job_type=job_type,
        user_command="true",
        resource_source="public",
        roles=[RoleSpec(role_type=role_type, pod_count=pods) for role_type, pods in roles],
    )
    with pytest.raises(ValidationFailed) as failed:  # a public job needs an instance type
        job_spec_resolve(spec, workspace=None)
    errors = failed.value.errors
    return {path: messages for path, messages in errors.items() if path.endswith(".pod_count")}


@pytest.mark.parametrize(
    ("job_type", "role_type"),
    [
        ("PyTorchJob", "Master"),
        ("XGBoostJob", "Master"),
        ("TFJob", "Chief"),
        ("TFJob", "Evaluator"),
        ("MPIJob", "Launcher"),
        ("RayJob", "Head"),
    ],
)
def test_it_refuses_more_than_one_pod_of_a_single_pod_role(job_type, role_type):
    errors = pod_count_errors(job_type, ("Worker", 4), (role_type, 3))
    assert errors == {"roles[1].pod_count": [f"a job has one {role_type} pod, not 3"]}
    assert pod_count_errors(job_type, ("Worker", 4), (role_type, 1)) == {}


@pytest.mark.parametrize("role_type", ["Worker", "PS"])
def test_it_takes_many_pods_of_the_other_roles(role_type):
    assert pod_count_errors("TFJob", (role_type, 8)) == {}
