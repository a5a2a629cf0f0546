"""Fallback instance types (ElasticSpotSpecs) on the create form: one line per type with its
own limit, the same rules as the API's, errors beside the field with the line they are
about, and the job page listing them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.jobs.models import ElasticSpotSpec, Job
from tests.web.test_jobs_views import field_error, spot_form

GN7 = "ecs.gn7i-c8g1.2xlarge"
FIELD = "roles-0-elastic_spot_specs"


def test_the_create_form_offers_fallback_types_per_role(alice_client):
    content = alice_client.get(reverse("jobs:create")).content.decode()
    for i in range(4):
        assert f'name="roles-{i}-elastic_spot_specs"' in content


@pytest.mark.django_db(transaction=True)
def test_it_submits_fallback_types_in_their_order(alice_client):
    lines = f"{GN7} SpotDiscountLimit=0.5\n\n"
    response = alice_client.post(reverse("jobs:create"), spot_form(**{FIELD: lines}), follow=True)
    job = Job.objects.get()
    fallbacks = ElasticSpotSpec.objects.filter(role__job=job)
    assert [(f.position, f.instance_type.name, f.spot_discount_limit) for f in fallbacks] == [
        (0, GN7, Decimal("0.50"))
    ]
    content = response.content.decode()
    assert f'fallback 1: <span class="mono">{GN7}</span>, SpotDiscountLimit 0.50 = ¥4.80/h' in (
        content
    )


def test_it_says_which_line_does_not_read(alice_client):
    response = alice_client.post(
        reverse("jobs:create"), spot_form(**{FIELD: f"{GN7} SpotDiscountLimit=0.5\n{GN7} 0.5"})
    )
    assert response.status_code == 200 and not Job.objects.exists()
    assert field_error(response, f"id_{FIELD}") == (
        "line 2: write an instance type, a space, then SpotDiscountLimit=0.5 or "
        "SpotPriceLimit=0.006"
    )


def test_it_shows_the_specs_rule_beside_the_field_with_its_line(alice_client):
    lines = f"{GN7} SpotDiscountLimit=0.5\necs.nope SpotPriceLimit=0.006"
    response = alice_client.post(reverse("jobs:create"), spot_form(**{FIELD: lines}))
    assert not Job.objects.exists()
    assert field_error(response, f"id_{FIELD}") == "line 2: unknown instance type 'ecs.nope'"


@pytest.mark.django_db(transaction=True)
def test_a_quota_job_leaves_stray_fallback_lines_out(alice_client):
    from tests.web.test_jobs_views import quota_form

    alice_client.post(reverse("jobs:create"), quota_form(**{FIELD: f"{GN7} SpotDiscountLimit=0.5"}))
    assert Job.objects.get().resource_source == "quota"
    assert not ElasticSpotSpec.objects.exists()
