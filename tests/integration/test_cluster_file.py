"""The cluster file: check (every problem, with its path), apply (idempotent, all or nothing)
and the apply_cluster command."""

from __future__ import annotations

import copy
import tomllib
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, ManagementUtility, call_command

from apps.cluster.clusterfile import cluster_file_check
from apps.cluster.models import Image, InstanceType, MarketParameters, Node, Quota, ResourcePool
from apps.cluster.selectors import cluster_state
from apps.core import pricing
from apps.jobs.selectors import busy_node_names
from apps.ops.services import cluster_apply
from apps.workspaces.models import AccessKey, Membership, Workspace

DEMO = Path(settings.BASE_DIR) / "examples" / "demo-cluster.toml"
ALL_MODELS = (
    InstanceType,
    ResourcePool,
    Node,
    Quota,
    Workspace,
    Membership,
    AccessKey,
    Image,
    MarketParameters,
)


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def demo() -> dict:
    return tomllib.loads(DEMO.read_text())


def check(data: dict, **kwargs):
    return cluster_file_check(
        data,
        existing=cluster_state(busy=busy_node_names()),
        environ=kwargs.pop("environ", {}),
        **kwargs,
    )


def apply(data: dict, **kwargs):
    declaration, errors = check(data, **kwargs)
    assert errors == []
    return cluster_apply(declaration=declaration)


def counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in (*ALL_MODELS, get_user_model())}


# --- Applying -----------------------------------------------------------------------------


def test_it_passes_its_own_check_without_a_database(demo):
    declaration, errors = cluster_file_check(demo, environ={})
    assert errors == []
    assert {q.name for q in declaration.quotas} >= {"ecs-root", "team-a", "team-b", "lingjun-a"}
    g7 = next(t for t in declaration.instance_types if t.name == "ecs.g7.xlarge")
    assert (g7.cpu, g7.memory, g7.gpu, g7.price_per_hour) == (4000, 16384, 0, Decimal("0.80"))
    # The seed's SpotPriceLimit (0.011 CNY per minute) is about 80% of the original price.
    assert Decimal("0.011") * 60 / g7.price_per_hour == Decimal("0.825")


@pytest.mark.django_db
def test_it_applies_the_demo_file(demo):
    report = apply(demo)
    assert report.total("updated") == report.total("unchanged") == 0
    assert report.counts["nodes"]["created"] == 6
    assert Node.objects.filter(pool__name="ecs-dedicated", gpu=8).count() == 4
    team_a = Quota.objects.get(name="team-a")
    assert (team_a.parent.name, team_a.pool.name, team_a.resource_type) == (
        "ecs-root",
        "ecs-dedicated",
        "ECS",
    )
    assert (team_a.min_gpu, team_a.min_cpu, team_a.min_memory) == (16, 256_000, 2048 * 1024)
    assert list(team_a.workspaces.values_list("name", flat=True)) == ["team-a"]
    assert Workspace.objects.get(name="team-a").display_name == "Vision"
    alice = get_user_model().objects.get(username="alice")
    assert alice.check_password("alice-demo-pw")
    assert Membership.objects.get(user=alice).role == "owner"
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff
    key = AccessKey.objects.get(key_id="LTAI5tDemoAlice000000001")
    assert key.user == alice and key.secret() == "DemoSecretAlice000000000000001"
    assert report.counts["images"]["created"] == 6
    sample = Image.objects.get(name="pytorch-cpu")
    assert sample.uri == "pytorch-training:1.12-cpu-py39-ubuntu20.04"  # the README's SDK job
    assert sample.description == "PyTorchJob: PyTorch 1.12, CPU"


@pytest.mark.django_db
def test_it_changes_nothing_when_applied_twice(demo):
    apply(demo)
    before = counts()
    report = apply(demo)
    assert report.total("created") == report.total("updated") == 0
    assert report.total("unchanged") == sum(sum(c.values()) for c in report.counts.values())
    assert not report.changed and report.changes == []
    assert counts() == before


@pytest.mark.django_db
def test_it_updates_changed_values_only(demo):
    apply(demo)
    changed = copy.deepcopy(demo)
    changed["quotas"]["team-b"]["min"]["gpu"] = 4
    changed["instance_types"]["ecs.g7.xlarge"]["price_per_hour"] = "0.85"
    changed["users"]["bob"]["password"] = "bob-new-password"
    changed["access_keys"]["LTAI5tDemoBob00000000001"]["secret"] = "AnotherBobSecret0000000000001"
    report = apply(changed)
    assert report.counts["quotas"] == {"created": 0, "updated": 1, "unchanged": 6}
    assert report.counts["instance types"]["updated"] == 1
    assert report.counts["users"]["updated"] == 1
    assert report.counts["access keys"]["updated"] == 1
    assert report.total("created") == 0
    assert "updated quota team-b: min_gpu 8 → 4" in report.changes
    assert "updated user bob: password changed" in report.changes
    assert not any("AnotherBobSecret" in c or "bob-new-password" in c for c in report.changes)
    assert Quota.objects.get(name="team-b").min_gpu == 4
    assert get_user_model().objects.get(username="bob").check_password("bob-new-password")
    assert AccessKey.objects.get(key_id="LTAI5tDemoBob00000000001").secret() == (
        "AnotherBobSecret0000000000001"
    )


@pytest.mark.django_db
def test_it_applies_images_by_name_and_again_changes_nothing(demo):
    apply(demo)
    demo["images"]["ray-gpu"] = {"uri": "ray-training:2.10-gpu"}  # a new image, no description
    demo["images"]["extra"] = {"uri": "registry.local/extra:1", "description": "Extra"}
    report = apply(demo)
    assert report.counts["images"] == {"created": 1, "updated": 1, "unchanged": 5}
    assert "created image extra" in report.changes
    assert (
        "updated image ray-gpu: uri 'ray-training:2.9-gpu-py310-cu121-ubuntu22.04' → "
        "'ray-training:2.10-gpu', description 'RayJob: Ray 2.9, CUDA 12.1' → ''"
    ) in report.changes
    assert Image.objects.get(name="ray-gpu").uri == "ray-training:2.10-gpu"
    before = counts()
    report = apply(demo)
    assert report.counts["images"] == {"created": 0, "updated": 0, "unchanged": 7}
    assert not report.changed and counts() == before
    del demo["images"]["extra"]  # left out of the file: kept (delete it in the admin)
    apply(demo)
    assert Image.objects.filter(name="extra").exists()


@pytest.mark.django_db
def test_it_never_deletes_and_leaves_node_status_alone(demo):
    apply(demo)
    Node.objects.filter(name="ecs-a100-0").update(status=Node.Status.CORDONED)
    extra = Node.objects.create(
        name="hand-made", pool=ResourcePool.objects.get(name="public"), cpu=4000, memory=16384
    )
    slim = {"workspaces": {"team-a": demo["workspaces"]["team-a"]}}
    report = apply(slim)
    assert report.counts["workspaces"]["unchanged"] == 1
    assert Node.objects.get(name="ecs-a100-0").status == Node.Status.CORDONED
    assert Node.objects.filter(pk=extra.pk).exists()
    assert Quota.objects.count() == 7
    report = apply(demo)
    assert not report.changed
    assert Node.objects.get(name="ecs-a100-0").status == Node.Status.CORDONED


@pytest.mark.django_db
def test_it_reads_passwords_and_secrets_from_the_environment(demo):
    demo["users"]["alice"] = {"password_env": "ALICE_PW", "memberships": {"team-a": "owner"}}
    demo["access_keys"]["LTAI5tDemoAlice000000001"] = {
        "user": "alice",
        "secret_env": "ALICE_SECRET",
    }
    apply(demo, environ={"ALICE_PW": "from-the-env-1", "ALICE_SECRET": "S" * 30})
    assert get_user_model().objects.get(username="alice").check_password("from-the-env-1")
    assert AccessKey.objects.get(key_id="LTAI5tDemoAlice000000001").secret() == "S" * 30


@pytest.mark.django_db
def test_it_refers_to_what_the_database_already_holds(demo):
    apply(demo)
    extra = {
        "quotas": {"team-c": {"parent": "team-b", "min": {"gpu": 2}}},
        "users": {"dana": {"memberships": {"team-b": "member"}}},
    }
    report = apply(extra)
    assert report.counts["quotas"]["created"] == 1
    assert Quota.objects.get(name="team-c").pool.name == "ecs-dedicated"
    assert not get_user_model().objects.get(username="dana").has_usable_password()

    too_much = {"quotas": {"team-d": {"parent": "team-b", "min": {"gpu": 7}}}}
    _, errors = check(too_much)
    assert errors == [
        "quotas.team-d.min.gpu: the children of 'team-b' need 9 GPU (team-c 2 GPU, team-d 7 GPU),"
        " more than its 8 GPU"
    ]


# --- Checking: every problem, with its place in the file ----------------------------------


def _set(path: str, value):
    """A mutation of the demo file: set `a.b.c` (keys with dots are given as tuples)."""

    def mutate(data: dict) -> None:
        keys = path if isinstance(path, tuple) else tuple(path.split("."))
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is _DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value

    return mutate


_DELETE = object()
G7 = ("instance_types", "ecs.g7.xlarge")

PROBLEMS = {
    "unknown section": (_set("nodes", {}), "nodes: unknown section"),
    "unknown key": (_set((*G7, "vcpu"), 4), 'instance_types."ecs.g7.xlarge".vcpu: unknown key'),
    "missing key": (
        _set((*G7, "vcpus"), _DELETE),
        'instance_types."ecs.g7.xlarge".vcpus: is required',
    ),
    "wrong type": (
        _set((*G7, "gpu"), "none"),
        'instance_types."ecs.g7.xlarge".gpu: must be a whole number',
    ),
    "bad choice": (
        _set((*G7, "resource_type"), "GPU"),
        'instance_types."ecs.g7.xlarge".resource_type: must be one of ECS, Lingjun',
    ),
    "bad price": (
        _set((*G7, "price_per_hour"), "0.123456"),
        'instance_types."ecs.g7.xlarge".price_per_hour: must have at most 4 decimal',
    ),
    "gpu without model": (
        _set(("instance_types", "ecs.gn7i-c8g1.2xlarge", "gpu_model"), _DELETE),
        'instance_types."ecs.gn7i-c8g1.2xlarge".gpu_model: is required when',
    ),
    "negative min": (_set("quotas.team-a.min.gpu", -1), "quotas.team-a.min.gpu: must be ≥ 0"),
    "too many GPUs on a node": (
        _set((*G7, "gpu"), 129),
        'instance_types."ecs.g7.xlarge".gpu: must be ≤ 128',
    ),
    "too many nodes": (  # refused before a billion names are made
        lambda data: data["pools"]["ecs-dedicated"]["nodes"][0].update(count=10**9),
        "pools.ecs-dedicated.nodes[0].count: must be ≤ 100000",
    ),
    "fractional memory": (
        _set("quotas.team-a.min.memory_gib", 0.0001),
        "quotas.team-a.min.memory_gib: must be a whole number of MiB",
    ),
    "unknown parent": (
        _set("quotas.team-a.parent", "rot"),
        "quotas.team-a.parent: unknown quota 'rot'",
    ),
    "own parent": (
        _set("quotas.ecs-root.parent", "ecs-root"),
        "quotas.ecs-root.parent: a quota cannot be its own parent",
    ),
    "cycle": (
        _set("quotas.ecs-root.parent", "team-a"),
        "quotas.ecs-root.parent: the parents form a cycle: ecs-root → team-a → ecs-root",
    ),
    "unknown pool": (
        _set("quotas.ecs-root.pool", "ecs-dedicatd"),
        "quotas.ecs-root.pool: unknown pool 'ecs-dedicatd'",
    ),
    "root without pool": (
        _set("quotas.ecs-root.pool", _DELETE),
        "quotas.ecs-root.pool: is required for a root quota",
    ),
    "public pool": (
        _set("quotas.ecs-root.pool", "public"),
        "quotas.ecs-root.pool: pool 'public' is public; quotas live in dedicated",
    ),
    "type differs from pool": (
        _set("quotas.lingjun-root.resource_type", "ECS"),
        "quotas.lingjun-root.resource_type: ECS differs from pool "
        "'lingjun-dedicated', which is Lingjun",
    ),
    "child in another pool": (
        _set("quotas.lingjun-a.pool", "ecs-dedicated"),
        "quotas.lingjun-a.pool: must be the parent's pool 'lingjun-dedicated'",
    ),
    "children exceed parent": (
        _set("quotas.team-b.min.gpu", 16),
        "quotas.ecs-root.min.gpu: the children's min adds up to 36 GPU "
        "(team-a 16 GPU, team-b 16 GPU, research 4 GPU), more than this "
        "quota's 32 GPU",
    ),
    "roots exceed nodes": (
        _set("quotas.lingjun-root.min.memory_gib", 4000),
        "quotas.lingjun-root.min.memory_gib: the root quotas of pool "
        "'lingjun-dedicated' guarantee 4000 GiB (lingjun-root 4000 GiB), but "
        "its nodes hold 3200 GiB",
    ),
    "unknown quota workspace": (
        _set("quotas.team-a.workspaces", ["team-z"]),
        "quotas.team-a.workspaces[0]: unknown workspace 'team-z'",
    ),
    "unknown node type": (
        _set(
            "pools.lingjun-dedicated.nodes",
            [{"prefix": "lj-", "count": 2, "instance_type": "ml.nope"}],
        ),
        "pools.lingjun-dedicated.nodes[0].instance_type: unknown instance type 'ml.nope'",
    ),
    "node type of another resource type": (
        _set("pools.lingjun-dedicated.nodes", [{"name": "lj-0", "instance_type": "ecs.g7.xlarge"}]),
        "pools.lingjun-dedicated.nodes[0].instance_type: ecs.g7.xlarge is ECS, but pool "
        "'lingjun-dedicated' is Lingjun",
    ),
    "node name and count": (
        _set(
            "pools.public.nodes",
            [{"name": "a", "prefix": "b", "count": 2, "vcpus": 4, "memory_gib": 16}],
        ),
        "pools.public.nodes[0]: give either name, or prefix and count",
    ),
    "node type and shape": (
        _set("pools.public.nodes", [{"name": "a", "vcpus": 4, "instance_type": "ecs.g7.xlarge"}]),
        "pools.public.nodes[0]: give either instance_type or a shape",
    ),
    "duplicate node": (
        _set("pools.public.nodes", [{"name": "ecs-a100-1", "vcpus": 4, "memory_gib": 16}]),
        "pools.public.nodes[0]: node 'ecs-a100-1' is already declared at "
        "pools.ecs-dedicated.nodes[0] (node ecs-a100-1)",
    ),
    "unknown membership workspace": (
        _set("users.bob.memberships", {"team-z": "member"}),
        "users.bob.memberships.team-z: unknown workspace 'team-z'",
    ),
    "bad role": (
        _set("users.bob.memberships", {"team-a": "boss"}),
        "users.bob.memberships.team-a: must be one of owner, admin, member",
    ),
    "short password": (
        _set("users.bob.password", "short"),
        "users.bob.password: This password is too short.",
    ),
    "unset password variable": (
        _set("users.bob", {"password_env": "NOPE_PW"}),
        "users.bob.password_env: environment variable NOPE_PW is not set",
    ),
    "unknown key owner": (
        _set("access_keys.LTAI5tDemoBob00000000001.user", "bobby"),
        "access_keys.LTAI5tDemoBob00000000001.user: unknown user 'bobby'",
    ),
    "short secret": (
        _set("access_keys.LTAI5tDemoBob00000000001.secret", "tiny"),
        "access_keys.LTAI5tDemoBob00000000001.secret: must be at least 16",
    ),
    "secret twice": (
        _set("access_keys.LTAI5tDemoBob00000000001.secret_env", "BOB_SECRET"),
        "access_keys.LTAI5tDemoBob00000000001: give either secret or secret_env",
    ),
    "image without a uri": (
        _set("images.pytorch-gpu.uri", _DELETE),
        "images.pytorch-gpu.uri: is required",
    ),
    "image uri with a space": (
        _set("images.ray-gpu.uri", "ray training:2.9"),
        "images.ray-gpu.uri: must be printable ASCII without spaces",
    ),
    "empty image uri": (_set("images.horovod-gpu.uri", ""), "images.horovod-gpu.uri: must not"),
    "image uri twice": (
        _set("images.xgboost-cpu.uri", "pytorch-training:1.12-cpu-py39-ubuntu20.04"),
        "images.xgboost-cpu.uri: 'pytorch-training:1.12-cpu-py39-ubuntu20.04' is already "
        "declared at images.pytorch-cpu",
    ),
    "unknown image key": (
        _set("images.tensorflow-gpu.tag", "2.15"),
        "images.tensorflow-gpu.tag: unknown key (expected uri, description)",
    ),
    "bad image name": (
        _set(("images", "py torch"), {"uri": "pytorch:2"}),
        'images."py torch": an image name holds only',
    ),
    "unknown market key": (
        _set("market.floor", 0.2),
        "market.floor: unknown key (expected "
        "floor_ratio, smoothing, volatility, sensitivity, average_window_",
    ),
    "floor not a number": (
        _set("market.floor_ratio", "cheap"),
        "market.floor_ratio: must be a number",
    ),
    "floor of 0": (_set("market.floor_ratio", 0), "market.floor_ratio: must be in (0, 1)"),
    "floor of 1": (_set("market.floor_ratio", "1"), "market.floor_ratio: must be in (0, 1)"),
    "floor too fine": (
        _set("market.floor_ratio", "0.1234"),
        "market.floor_ratio: must have at most 3 decimal places",
    ),
    "smoothing of 0": (_set("market.smoothing", 0), "market.smoothing: must be in (0, 1]"),
    "smoothing above 1": (_set("market.smoothing", 1.5), "market.smoothing: must be in (0, 1]"),
    "smoothing as text": (_set("market.smoothing", "0.5"), "market.smoothing: must be a number"),
    "negative volatility": (
        _set("market.volatility", -0.1),
        "market.volatility: must be in [0, 1)",
    ),
    "volatility of 1": (_set("market.volatility", 1), "market.volatility: must be in [0, 1)"),
    "sensitivity of 0": (_set("market.sensitivity", 0), "market.sensitivity: must be > 0"),
    "sensitivity as a flag": (
        _set("market.sensitivity", True),
        "market.sensitivity: must be a number",
    ),
    "window of 0": (
        _set("market.average_window_minutes", 0),
        "market.average_window_minutes: must be > 0",
    ),
    "window under a second": (
        _set("market.average_window_minutes", 0.01),
        "market.average_window_minutes: must be at least one second",
    ),
    "market not a table": (_set("market", 0.1), "market: must be a table"),  # last: replaces it
}


@pytest.mark.django_db
@pytest.mark.parametrize("problem", PROBLEMS, ids=list(PROBLEMS))
def test_it_reports_each_problem_with_its_path(demo, problem):
    mutate, expected = PROBLEMS[problem]
    mutate(demo)
    declaration, errors = check(demo)
    assert declaration is None
    assert any(e.startswith(expected) for e in errors), errors


def test_an_unknown_pool_is_said_once_where_it_is_named(demo):
    """A root naming a pool that does not exist was reported at each child too, as
    "quotas.team-a.parent: unknown pool 'ecs-dedicatd'": team-a's parent is a quota."""
    _set("quotas.ecs-root.pool", "ecs-dedicatd")(demo)

    _, errors = cluster_file_check(demo, environ={})

    assert [e for e in errors if "unknown pool" in e] == [
        "quotas.ecs-root.pool: unknown pool 'ecs-dedicatd'"
    ]


def test_it_reports_every_problem_at_once(demo):
    for mutate, _ in PROBLEMS.values():
        mutate(demo)
    # Without the database: only what the file itself says.
    _, errors = cluster_file_check(demo, environ={})
    assert len(errors) >= 20
    # A reference to an instance type with problems of its own is not "unknown" as well.
    assert not any("unknown instance type 'ecs.g7.xlarge'" in e for e in errors)
    for expected in (
        "quotas.team-a.min.gpu: must be ≥ 0",
        "nodes: unknown section",
        "access_keys.LTAI5tDemoBob00000000001.user: unknown user 'bobby'",
    ):
        assert any(e.startswith(expected) for e in errors), expected


@pytest.mark.django_db
def test_it_refuses_to_move_a_key_to_another_owner(demo):
    apply(demo)
    demo["access_keys"]["LTAI5tDemoBob00000000001"]["user"] = "alice"
    _, errors = check(demo)
    assert errors == [
        "access_keys.LTAI5tDemoBob00000000001.user: the key belongs to 'bob'; a key"
        " never changes owner (delete it in the admin first)"
    ]


@pytest.mark.django_db
def test_it_checks_roots_against_nodes_declared_earlier(demo):
    apply(demo)
    grow = {
        "quotas": {
            "lingjun-root": {
                "pool": "lingjun-dedicated",
                "min": {"gpu": 24, "cpu": 192, "memory_gib": 3200},
            }
        }
    }
    _, errors = check(grow)
    assert errors == [
        "quotas.lingjun-root.min.gpu: the root quotas of pool 'lingjun-dedicated' "
        "guarantee 24 GPU (lingjun-root 24 GPU), but its nodes hold 16 GPU"
    ]
    more_nodes = {
        **grow,
        "pools": {
            "lingjun-dedicated": {
                "kind": "dedicated",
                "resource_type": "Lingjun",
                "nodes": [
                    {
                        "prefix": "lingjun-gu108-",
                        "start": 2,
                        "count": 1,
                        "instance_type": "ml.gu7xf.c96m1600.8-gu108",
                    }
                ],
            }
        },
    }
    report = apply(more_nodes)
    assert report.counts["nodes"]["created"] == 1
    assert Node.objects.filter(name="lingjun-gu108-2").exists()


# --- The market's parameters --------------------------------------------------------------


def test_it_reads_the_market_table_with_a_floor_given_as_text_or_number(demo):
    demo["market"] = {
        "floor_ratio": "0.15",
        "smoothing": 1,
        "volatility": 0,
        "sensitivity": 2.5,
        "average_window_minutes": 30,
    }
    declaration, errors = cluster_file_check(demo, environ={})
    assert errors == []
    m = declaration.market
    assert (m.floor_ratio, m.smoothing, m.volatility, m.sensitivity, m.average_window_seconds) == (
        Decimal("0.15"),
        1.0,
        0.0,
        2.5,
        1800.0,
    )
    demo["market"] = {"floor_ratio": 0.15}  # a TOML float: the Decimal it was written as
    declaration, _ = cluster_file_check(demo, environ={})
    assert declaration.market.floor_ratio == Decimal("0.15")
    assert declaration.market.smoothing == pricing.MarketParams().smoothing
    del demo["market"]
    assert cluster_file_check(demo, environ={})[0].market is None


@pytest.mark.django_db
def test_it_applies_the_market_table_once_and_reports_what_changed(demo):
    report = apply(demo)  # the demo file writes the defaults out
    assert report.counts["market"] == {"created": 1, "updated": 0, "unchanged": 0}
    assert MarketParameters.load().to_params() == pricing.MarketParams()

    demo["market"].update(floor_ratio="0.2", smoothing=0.5, average_window_minutes=90)
    report = apply(demo)
    assert report.counts["market"] == {"created": 0, "updated": 1, "unchanged": 0}
    assert report.total("updated") == 1
    assert report.changes == [
        "updated market parameters: floor_ratio 0.100 → 0.2, smoothing "
        "0.2 → 0.5, average_window_seconds 3600.0 → 5400.0"
    ]
    params = MarketParameters.load().to_params()
    assert (params.floor_ratio, params.smoothing, params.average_window_seconds) == (
        Decimal("0.2"),
        0.5,
        5400.0,
    )

    report = apply(demo)
    assert report.counts["market"] == {"created": 0, "updated": 0, "unchanged": 1}
    assert not report.changed

    del demo["market"]["smoothing"]  # a key left out takes its default again
    report = apply(demo)
    assert report.changes == ["updated market parameters: smoothing 0.5 → 0.2"]
    del demo["market"]  # no table: the market keeps what it has
    report = apply(demo)
    assert report.counts["market"] == {"created": 0, "updated": 0, "unchanged": 0}
    assert MarketParameters.load().floor_ratio == Decimal("0.2")


@pytest.mark.django_db
def test_it_writes_no_market_parameters_from_a_file_with_a_problem_or_a_dry_run(tmp_path):
    text = DEMO.read_text().replace('floor_ratio = "0.1" ', 'floor_ratio = "0.25"')
    text = text.replace(
        "min = { gpu = 16, cpu = 256, memory_gib = 2048 }",
        "min = { gpu = -1, cpu = 256, memory_gib = 2048 }",
    )
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(CommandError, match=r"1 problem, nothing applied"):
        call_command("apply_cluster", str(path), stdout=StringIO())
    assert not MarketParameters.objects.exists()
    out = StringIO()
    call_command("apply_cluster", str(DEMO), "--dry-run", stdout=out)
    assert "market          created   1" in out.getvalue()
    assert not MarketParameters.objects.exists()


# --- The command --------------------------------------------------------------------------


def _broken_demo(tmp_path: Path) -> Path:
    text = DEMO.read_text()
    text = text.replace(
        "min = { gpu = 16, cpu = 256, memory_gib = 2048 }",
        "min = { gpu = -1, cpu = 256, memory_gib = 2048 }",
    )
    text = text.replace('[quotas.team-b]\nparent = "ecs-root"', '[quotas.team-b]\nparent = "rot"')
    path = tmp_path / "broken.toml"
    path.write_text(text)
    return path


@pytest.mark.django_db
def test_it_applies_from_the_command_and_reports_counts():
    out = StringIO()
    call_command("apply_cluster", str(DEMO), stdout=out)
    assert "quotas          created   7  updated   0  unchanged   0" in out.getvalue()
    assert "images          created   6  updated   0  unchanged   0" in out.getvalue()
    assert "45 created, 0 updated." in out.getvalue()
    out = StringIO()
    call_command("apply_cluster", str(DEMO), stdout=out)
    assert "total           created   0  updated   0  unchanged  45" in out.getvalue()
    assert "Nothing to change" in out.getvalue()


@pytest.mark.django_db
def test_it_writes_nothing_when_the_file_has_one_problem(tmp_path):
    before = counts()
    with pytest.raises(CommandError) as caught:
        call_command("apply_cluster", str(_broken_demo(tmp_path)), stdout=StringIO())
    assert caught.value.returncode == 1
    message = str(caught.value)
    assert "2 problems, nothing applied:" in message
    assert "  quotas.team-a.min.gpu: must be ≥ 0" in message
    assert "  quotas.team-b.parent: unknown quota 'rot'" in message
    assert counts() == before


@pytest.mark.django_db(transaction=True)  # the command closes the connection
def test_it_exits_non_zero_with_the_list_on_stderr(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        ManagementUtility(["manage.py", "apply_cluster", str(_broken_demo(tmp_path))]).execute()
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert "quotas.team-a.min.gpu: must be ≥ 0" in err
    assert "quotas.team-b.parent: unknown quota 'rot'" in err
    assert Quota.objects.count() == 0


@pytest.mark.django_db
def test_it_rejects_a_file_that_is_not_toml(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[quotas.team-a\nmin = 1\n")
    with pytest.raises(CommandError, match=r"not valid TOML: .*line 1"):
        call_command("apply_cluster", str(path))
    with pytest.raises(CommandError, match="no such file"):
        call_command("apply_cluster", str(tmp_path / "missing.toml"))


@pytest.mark.django_db
def test_it_writes_nothing_on_a_dry_run():
    out = StringIO()
    call_command("apply_cluster", str(DEMO), "--dry-run", stdout=out)
    assert "dry run, nothing written" in out.getvalue()
    assert "created  45" in out.getvalue()
    assert Quota.objects.count() == 0 and get_user_model().objects.count() == 0


@pytest.mark.django_db
def test_it_lists_changes_at_verbosity_two(demo):
    apply(demo)
    Quota.objects.filter(name="team-a").update(min_gpu=12)
    out = StringIO()
    call_command("apply_cluster", str(DEMO), verbosity=2, stdout=out)
    assert "updated quota team-a: min_gpu 12 → 16" in out.getvalue()


@pytest.mark.django_db
def test_it_refuses_to_remove_capacity_quotas_rely_on(demo):
    apply(demo)
    shrink = {
        "pools": {
            "lingjun-dedicated": {
                "kind": "dedicated",
                "resource_type": "Lingjun",
                "nodes": [
                    {
                        "name": "lingjun-gu108-1",
                        "vcpus": 96,
                        "memory_gib": 1600,
                        "gpu": 4,
                        "gpu_model": "GU108",
                    }
                ],
            }
        }
    }
    _, errors = check(shrink)
    assert errors == [
        "pools.lingjun-dedicated.nodes: the root quotas of pool 'lingjun-dedicated'"
        " guarantee 16 GPU (lingjun-root 16 GPU), but its nodes hold 12 GPU"
    ]


@pytest.mark.django_db
def test_it_refuses_more_nodes_than_the_engine_takes_in_one_file(demo):
    groups = demo["pools"]["ecs-dedicated"]["nodes"]
    groups[0].update(count=60_000)
    groups.append({**groups[0], "prefix": "more-", "count": 40_001})
    declaration, errors = check(demo)
    assert declaration is None
    assert "pools.ecs-dedicated.nodes[1]: more than 100000 nodes in the file" in errors
