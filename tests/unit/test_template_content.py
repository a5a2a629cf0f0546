"""A job template's Content is a CreateJob body: `serializers.create_job_body` writes one that
`parsing.job_spec_from_create_job` reads back as the same spec, whatever the spec."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.api.parsing import job_spec_from_create_job
from apps.api.serializers import create_job_body
from apps.jobs.specs import JobSpec, RoleSpec, SpotFallback, spec_from_json, spec_to_json

text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
name = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)


@st.composite
def roles(draw, *, spot: bool):
    instance = draw(st.booleans())
    share = draw(st.booleans())
    return RoleSpec(
        role_type=draw(st.sampled_from(["Worker", "Master", "PS", "Chief"])),
        pod_count=draw(st.integers(1, 64)),
        instance_type=draw(name) if instance else "",
        cpu=None if instance else draw(st.integers(1, 64)) * 500,
        memory=None if instance else draw(st.integers(1, 512)) * 512,
        gpu=None if instance else (0 if share else draw(st.integers(0, 8))),
        gpu_milli=0 if instance or not share else draw(st.integers(1, 999)),
        image=draw(st.sampled_from(["", "registry.local/pytorch:2.3"])),
        restart_policy=draw(st.sampled_from(["OnFailure", "Never", "Always"])),
        spot_discount_limit=draw(st.sampled_from([None, Decimal("0.3")])) if spot else None,
        spot_price_limit=draw(st.sampled_from([None, Decimal("0.011")])) if spot else None,
        elastic_spot_specs=draw(st.lists(fallbacks, max_size=2)) if spot else [],
    )


fallbacks = st.builds(
    lambda name, discount: SpotFallback(
        instance_type=name,
        spot_discount_limit=discount,
        spot_price_limit=None if discount else Decimal("0.006"),
    ),
    name,
    st.sampled_from([None, Decimal("0.5")]),
)


@st.composite
def specs(draw):
    source = draw(st.sampled_from(["quota", "public", "spot"]))
    aimaster = draw(st.booleans())
    job_roles = draw(st.lists(roles(spot=source == "spot"), min_size=1, max_size=3))
    image = next((r.image for r in job_roles if r.image), "")
    return JobSpec(
        display_name=draw(name),
        description=draw(text),
        accessibility=draw(st.sampled_from(["PUBLIC", "PRIVATE"])),
        tags=draw(st.dictionaries(name, name, max_size=3)),
        job_type=draw(st.sampled_from(["PyTorchJob", "TFJob", "MPIJob"])),
        image=image,
        user_command=draw(text.filter(str.strip)),
        envs=draw(st.dictionaries(st.from_regex(r"[A-Z_]{1,8}", fullmatch=True), text)),
        data_sources=draw(
            st.lists(
                st.builds(
                    lambda u, m: {"uri": f"oss://{u}", "mount_path": f"/mnt/{m}"}, name, name
                ),
                max_size=2,
            )
        ),
        code_source=draw(st.sampled_from([{}, {"code_source_id": "cs-1", "branch": "main"}])),
        priority=draw(st.integers(1, 9)),
        max_running_time_minutes=draw(st.sampled_from([None, 60])),
        success_policy=draw(st.sampled_from(["AllWorkers", "ChiefWorker"])),
        resource_type="ECS",
        resource_source=source,
        quota="team-a" if source == "quota" else "",
        idle_mode=draw(st.sampled_from(["off", "acceptable", "only_idle"]))
        if source == "quota"
        else "off",
        vpc_id=draw(st.sampled_from(["", "vpc-1"])),
        enable_aimaster=aimaster,
        max_restarts=draw(st.integers(0, 9)) if aimaster else 3,
        execution_mode=draw(st.sampled_from(["Sync", "Async"])) if aimaster else "Sync",
        hang_seconds=draw(st.sampled_from([None, 600])) if aimaster else None,
        enable_easyckpt=draw(st.booleans()),
        termination_grace_seconds=draw(st.integers(0, 3600)),
        roles=job_roles,
    )


@pytest.mark.django_db
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(specs())
def test_a_spec_comes_back_from_its_create_job_body(spec):
    parsed = job_spec_from_create_job(create_job_body(spec))
    # the body names no ResourceType: it is the quota's or the instance type's (ECS here)
    for f in ("roles",) + tuple(k for k in vars(spec) if k != "roles"):
        assert getattr(parsed, f) == getattr(spec, f), f


@settings(max_examples=200, deadline=None)
@given(specs())
def test_a_spec_comes_back_from_its_json(spec):
    """A template's stored content (`spec_to_json`), ElasticSpotSpecs included."""
    assert spec_from_json(spec_to_json(spec)) == spec
