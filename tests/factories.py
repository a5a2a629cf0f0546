"""Small builders for test data: a cluster like the demo's, and persona users.

alice owns workspace team-a, bob is a member of team-a, charlie is in team-b only.
"""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model

from apps.cluster.models import InstanceType, Node, Quota, ResourcePool
from apps.workspaces.models import AccessKey, Membership, Workspace

GIB = 1024


def make_user(username: str, *, password: str = "pw-" + "x" * 10, superuser: bool = False):
    User = get_user_model()
    if superuser:
        return User.objects.create_superuser(username, f"{username}@example.com", password)
    return User.objects.create_user(username, f"{username}@example.com", password)


def make_access_key(user, *, key_id: str | None = None, secret: str | None = None):
    new_id, new_secret = AccessKey.new_pair()
    key = AccessKey(user=user, key_id=key_id or new_id)
    key.set_secret(secret or new_secret)
    key.save()
    return key, secret or new_secret


def make_cluster() -> dict:
    """Instance types, a dedicated ECS pool with 4 GPU nodes, a Lingjun pool, a public pool,
    and a quota tree: root (16 GPU) → team-a (8 GPU), team-b (8 GPU)."""
    g7 = InstanceType.objects.create(
        name="ecs.g7.xlarge",
        resource_type="ECS",
        cpu=4000,
        memory=16 * GIB,
        gpu=0,
        price_per_hour=Decimal("0.8000"),
        public_capacity=20,
    )
    gn7 = InstanceType.objects.create(
        name="ecs.gn7i-c8g1.2xlarge",
        resource_type="ECS",
        cpu=8000,
        memory=30 * GIB,
        gpu=1,
        gpu_model="A10",
        price_per_hour=Decimal("9.6000"),
        public_capacity=8,
    )
    lj = InstanceType.objects.create(
        name="ml.gu8xf.8xlarge-gu108",
        resource_type="Lingjun",
        cpu=128000,
        memory=1024 * GIB,
        gpu=8,
        gpu_model="GU108",
        price_per_hour=Decimal("200.0000"),
        public_capacity=4,
    )
    dedicated = ResourcePool.objects.create(
        name="ecs-dedicated", kind="dedicated", resource_type="ECS"
    )
    lingjun = ResourcePool.objects.create(
        name="lingjun-dedicated", kind="dedicated", resource_type="Lingjun"
    )
    public = ResourcePool.objects.create(name="public", kind="public", resource_type="ECS")
    nodes = [
        Node.objects.create(
            name=f"gpu-node-{i}",
            pool=dedicated,
            cpu=96000,
            memory=768 * GIB,
            gpu=4,
            gpu_model="A100",
        )
        for i in range(4)
    ]
    Node.objects.create(
        name="lingjun-node-0", pool=lingjun, cpu=128000, memory=1024 * GIB, gpu=8, gpu_model="GU108"
    )
    root = Quota.objects.create(
        name="root-ecs",
        pool=dedicated,
        resource_type="ECS",
        min_cpu=384000,
        min_memory=3072 * GIB,
        min_gpu=16,
    )
    team_a = Quota.objects.create(
        name="team-a",
        parent=root,
        pool=dedicated,
        resource_type="ECS",
        min_cpu=192000,
        min_memory=1536 * GIB,
        min_gpu=8,
    )
    team_b = Quota.objects.create(
        name="team-b",
        parent=root,
        pool=dedicated,
        resource_type="ECS",
        min_cpu=192000,
        min_memory=1536 * GIB,
        min_gpu=8,
    )
    lj_quota = Quota.objects.create(
        name="lingjun-a",
        pool=lingjun,
        resource_type="Lingjun",
        min_cpu=128000,
        min_memory=1024 * GIB,
        min_gpu=8,
    )
    return {
        "g7": g7,
        "gn7": gn7,
        "lingjun_type": lj,
        "dedicated": dedicated,
        "lingjun": lingjun,
        "public": public,
        "nodes": nodes,
        "root": root,
        "team_a": team_a,
        "team_b": team_b,
        "lingjun_quota": lj_quota,
    }


def make_personas(cluster: dict) -> dict:
    alice, bob, charlie = make_user("alice"), make_user("bob"), make_user("charlie")
    ws_a = Workspace.objects.create(name="team-a", display_name="Team A")
    ws_b = Workspace.objects.create(name="team-b", display_name="Team B")
    Membership.objects.create(user=alice, workspace=ws_a, role="owner")
    Membership.objects.create(user=bob, workspace=ws_a, role="member")
    Membership.objects.create(user=charlie, workspace=ws_b, role="owner")
    cluster["team_a"].workspaces.add(ws_a)
    cluster["lingjun_quota"].workspaces.add(ws_a)
    cluster["team_b"].workspaces.add(ws_b)
    return {"alice": alice, "bob": bob, "charlie": charlie, "ws_a": ws_a, "ws_b": ws_b}


def submit_small_job(personas: dict, name: str = "small"):
    """alice's smallest quota job on team-a (1 core, 1 GiB, no GPU), through job_submit."""
    from apps.jobs.services import job_submit
    from apps.jobs.specs import JobSpec, RoleSpec

    spec = JobSpec(
        display_name=name,
        user_command="true",
        quota="team-a",
        roles=[RoleSpec(cpu=1000, memory=GIB, gpu=0)],
    )
    return job_submit(workspace=personas["ws_a"], user=personas["alice"], spec=spec)
