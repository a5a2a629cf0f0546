"""The seed's two scripts (docs: spot jobs via the Python SDK) run against paiweb with only
the endpoint, the protocol, the credentials and the workspace id changed.

The seed's `CredClient()` reads the default chain (environment variables first, read when
alibabacloud_credentials is imported); the test hands the same client an explicit
AccessKey pair instead."""

from __future__ import annotations

import pytest
from alibabacloud_credentials.client import Client as CredClient
from alibabacloud_credentials.models import Config as CredConfig
from alibabacloud_pai_dlc20201203.client import Client as DLCClient
from alibabacloud_pai_dlc20201203.models import CreateJobRequest, GetJobRequest
from alibabacloud_tea_openapi.models import Config

from apps.jobs.models import Job

BID_BY_DISCOUNT = {"SpotStrategy": "SpotWithPriceLimit", "SpotDiscountLimit": 0.4}
BID_BY_PRICE = {"SpotStrategy": "SpotWithPriceLimit", "SpotPriceLimit": 0.011}


def seed_script(*, endpoint: str, key: tuple[str, str], workspace_id: str, spot_spec: dict) -> str:
    """The seed's script; region, credentials, endpoint and workspace filled in."""
    region_id = "cn-hangzhou"
    cred = CredClient(CredConfig(type="access_key", access_key_id=key[0], access_key_secret=key[1]))
    dlc_client = DLCClient(
        Config(credential=cred, region_id=region_id, endpoint=endpoint, protocol="http")
    )

    create_job_resp = dlc_client.create_job(
        CreateJobRequest().from_map(
            {
                "WorkspaceId": workspace_id,
                "DisplayName": "sample-spot-job",
                "JobType": "PyTorchJob",
                "JobSpecs": [
                    {
                        "Type": "Worker",
                        "Image": "dsw-registry-vpc.<region-id>.cr.aliyuncs.com/pai/pytorch-training:1.12-cpu-py39-ubuntu20.04",  # noqa: E501
                        "PodCount": 1,
                        "EcsSpec": "ecs.g7.xlarge",
                        "SpotSpec": spot_spec,
                    },
                ],
                "UserVpc": {
                    "VpcId": "vpc-0jlq8l7qech3m2ta2****",
                    "SwitchId": "vsw-0jlc46eg4k3pivwpz8****",
                    "SecurityGroupId": "sg-0jl4bd9wwh5auei9****",
                },
                "UserCommand": "echo 'Hello World' && ls -R /mnt/data/ && sleep 30 && echo 'DONE'",
            }
        )
    )
    job_id = create_job_resp.body.job_id
    print(f"jobId is {job_id}")
    return job_id


@pytest.mark.parametrize("spot_spec", [BID_BY_DISCOUNT, BID_BY_PRICE], ids=["discount", "price"])
def test_it_runs_the_seed_script_and_the_job_bids(spot_spec, endpoint, keys, ws_a, dlc):
    job_id = seed_script(
        endpoint=endpoint, key=keys["alice"], workspace_id=ws_a, spot_spec=spot_spec
    )

    body = dlc.get_job(job_id, GetJobRequest()).body
    assert body.status == "Bidding"
    assert body.display_name == "sample-spot-job"
    [spec] = body.job_specs
    assert spec.ecs_spec == "ecs.g7.xlarge"
    assert spec.spot_spec.spot_strategy == "SpotWithPriceLimit"
    assert spec.spot_spec.to_map() == spot_spec
    assert [h.status for h in body.status_history] == ["Creating", "Bidding"]
    job = Job.objects.get(job_id=job_id)
    assert (job.resource_source, job.vpc_id) == ("spot", "vpc-0jlq8l7qech3m2ta2****")
