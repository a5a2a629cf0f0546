"""Reading traces, node lists, cluster files and policies."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from apps.cluster.clusterfile import cluster_file_check
from apps.simulator import (
    ClusterError,
    PolicyError,
    TraceError,
    made_up_cluster,
    parse_policies,
    read_cluster_file,
    read_jobs,
    read_nodes,
)
from apps.simulator.cluster import assign_quota
from apps.simulator.trace import check_jobs_header
from tests.simulator.helpers import job, nodes

ROOT = Path(__file__).resolve().parents[2]
OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
OPENB_PODS = (
    OPENB_HEADER
    + """pod-b,6000,12288,1,460,,LS,Running,50,1000,60
pod-a,12000,16384,8,1000,,BE,Running,0,500,0
pod-c,1000,2048,0,0,,LS,Pending,70,90,
"""
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_it_reads_the_openb_pod_list(tmp_path):
    jobs = read_jobs(write(tmp_path, "pods.csv", OPENB_PODS))
    assert [j.name for j in jobs] == ["pod-a", "pod-b", "pod-c"]  # by creation time
    a, b, c = jobs
    assert (a.gpu, a.gpu_milli, a.duration, a.qos) == (8, 8000, 500, "BE")
    # a share of one GPU (a whole one when GPUs are not shared), measured by what it asked for
    assert (b.gpu, b.gpu_milli, b.fractional, b.share) == (1, 460, True, 460)
    assert (a.fractional, a.share) == (False, 0)
    assert b.duration == 1000 - 60 and b.recorded_delay == 10
    assert (c.gpu, c.duration, c.recorded_delay) == (0, 20, None)  # never scheduled


def test_it_reads_the_own_job_format(tmp_path):
    text = (
        "name,submit_time,duration,pods,gpu,cpu,memory_gib,qos,quota,idle_mode,priority\n"
        "train,10,3600,4,8,32,256,LS,team-a,off,5\n"
        "notebook,20,,1,0.5,2,8,BE,,only_idle,\n"
    )
    train, notebook = read_jobs(write(tmp_path, "jobs.csv", text))
    assert (train.pods, train.gpu, train.cpu, train.memory, train.priority) == (
        4,
        8,
        32_000,
        256 * 1024,
        5,
    )
    assert train.quota == "team-a" and train.idle_mode == "off"
    assert (notebook.gpu, notebook.gpu_milli, notebook.duration) == (1, 500, None)


@pytest.mark.parametrize(
    "row, message",
    [
        ("a,x,10,1,1,1,1", "submit_time must be a number"),
        ("a,0,10,1,1.5,1,1", "gpu must be whole"),
        ("a,0,10,0,1,1,1", "pods must be from 1 to 1000"),
        ("a,0,10,100000000,1,1,1", "pods must be from 1 to 1000"),  # not 10^8 pods made
    ],
)
def test_it_names_the_row_of_a_bad_job(tmp_path, row, message):
    path = write(tmp_path, "bad.csv", "name,submit_time,duration,pods,gpu,cpu,memory_gib\n" + row)
    with pytest.raises(TraceError, match=message) as e:
        read_jobs(path)
    assert f"{path}:2" in str(e.value)


@pytest.mark.parametrize(
    "row, message",
    [
        (
            "p,1000,100,1,1500,,LS,Running,0,10,0",
            "gpu_milli is thousandths of one GPU, at most 1000, got '1500'",
        ),
        ("p,-5,100,1,1000,,LS,Running,0,10,0", "cpu_milli must be a whole number ≥ 0, got '-5'"),
        ("p,1000,100,1,1000,,LS,Running,nan,10,0", "creation_time must be a number, got 'nan'"),
    ],
)
def test_it_names_the_row_of_a_bad_openb_pod(tmp_path, row, message):
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    header += "creation_time,deletion_time,scheduled_time\n"
    path = write(tmp_path, "pods.csv", header + row)
    with pytest.raises(TraceError, match=re.escape(f"{path}:2: {message}")):
        read_jobs(path)


def test_it_reads_a_trace_a_spreadsheet_saved_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfname,submit_time,pods,gpu\r\ntrain,10,2,1\r\n")
    (job,) = read_jobs(path)
    assert (job.name, job.submit, job.pods) == ("train", 10, 2)
    check_jobs_header(path.read_bytes(), "excel.csv")  # the upload form reads it alike


def test_it_refuses_a_file_that_is_no_trace(tmp_path):
    with pytest.raises(TraceError, match="not a job trace"):
        read_jobs(write(tmp_path, "x.csv", "a,b\n1,2\n"))


@pytest.mark.parametrize(
    "data, says",
    [
        (b"\xff\xfename,submit_time\n", "not UTF-8 text (byte 0xff)"),  # in the header
        (b"name,submit_time\na,1\nb,\xe9\n", "not UTF-8 text (byte 0xe9)"),  # in a row
    ],
)
def test_it_names_a_file_that_is_not_text(tmp_path, data, says):
    path = tmp_path / "bytes.csv"
    path.write_bytes(data)
    for read in (read_jobs, read_nodes):
        with pytest.raises(TraceError) as e:
            read(path)
        assert str(e.value) == f"{path}: {says}"


def test_it_reads_node_lists_in_three_formats(tmp_path):
    openb = read_nodes(
        write(tmp_path, "n1.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\n")
    )
    assert (openb[0].cpu, openb[0].memory, openb[0].gpu) == (96_000, 393_216, 8)
    spot = read_nodes(
        write(tmp_path, "n2.csv", "gpu_model,gpu_capacity_num,cpu_num,node_name\nGPU-1,4,192,7\n")
    )
    assert (spot[0].name, spot[0].cpu, spot[0].gpu) == ("node-7", 192_000, 4)
    own = read_nodes(write(tmp_path, "n3.csv", "name,cpu,memory_gib,gpu,count\ng-,96,768,8,3\n"))
    assert [n.name for n in own] == ["g-0", "g-1", "g-2"]
    assert own[0].memory == 768 * 1024


@pytest.mark.parametrize(
    "text, says",
    [  # a typo must not fill the memory before anything is said
        ("name,cpu,memory_gib,gpu,count\ng-,96,768,8,1000000000\n", "2: more than 100000 nodes"),
        (
            "name,cpu,memory_gib,gpu,count\ng-,96,768,8,60000\nh-,96,768,8,40001\n",
            "3: more than 100000 nodes",
        ),
        ("sn,cpu_milli,memory_mib,gpu\nn0,96000,393216,100000000\n", "2: at most 128 GPUs"),
        ("name,cpu,memory_gib,gpu\ng,96,768,129\n", "2: at most 128 GPUs on one node, got 129"),
    ],
)
def test_it_refuses_node_lists_beyond_the_engines_limits(tmp_path, text, says):
    path = write(tmp_path, "n.csv", text)
    with pytest.raises(TraceError, match=re.escape(f"{path}:{says}")):
        read_nodes(path)
    assert (
        len(
            read_nodes(
                write(tmp_path, "ok.csv", "name,cpu,memory_gib,gpu,count\ng-,1,1,128,100000\n")
            )
        )
        == 100_000
    )


@pytest.mark.parametrize(
    "group, says",
    [
        ('prefix = "n"\ncount = 1000000000', "pools.p.nodes[0].count: must be ≤ 100000"),
        ('name = "n"\ngpu = 129\ngpu_model = "X"', "pools.p.nodes[0].gpu: must be ≤ 128"),
    ],
)
def test_it_refuses_cluster_files_beyond_the_engines_limits(tmp_path, group, says):
    text = (
        '[pools.p]\nkind = "dedicated"\nresource_type = "ECS"\n'
        f"[[pools.p.nodes]]\nvcpus = 8\nmemory_gib = 64\n{group}\n"
    )
    with pytest.raises(ClusterError, match=re.escape(says)):
        read_cluster_file(write(tmp_path, "c.toml", text))
    two = text + '[[pools.p.nodes]]\nprefix = "m"\ncount = 100000\nvcpus = 8\nmemory_gib = 64\n'
    two = two.replace("1000000000", "1").replace("gpu = 129", "gpu = 1")
    with pytest.raises(ClusterError, match=re.escape("pools.p.nodes[1]: more than 100000 nodes")):
        read_cluster_file(write(tmp_path, "c2.toml", two))


CLUSTER = """
[instance_types."ecs.big"]
resource_type = "ECS"
vcpus = 96
memory_gib = 768
gpu = 8
gpu_model = "A100"
price_per_hour = "100.00"

[pools.dedicated]
kind = "dedicated"
resource_type = "ECS"
[[pools.dedicated.nodes]]
prefix = "big-"
count = 2
instance_type = "ecs.big"

[pools.public]
kind = "public"
resource_type = "ECS"

[quotas.root]
pool = "dedicated"
min = { gpu = 16, cpu = 192, memory_gib = 1536 }
[quotas.team-a]
parent = "root"
min = { gpu = 12, cpu = 96, memory_gib = 768 }
queue_strategy = "BestEffortFIFO"
[quotas.team-b]
parent = "root"
min = { gpu = 4, cpu = 96, memory_gib = 768 }
"""


def test_it_reads_pools_and_quotas_from_a_cluster_file(tmp_path):
    cluster = read_cluster_file(write(tmp_path, "c.toml", CLUSTER))
    assert cluster.node_names == ("big-0", "big-1") and cluster.gpus == 16
    assert cluster.leaves == ("team-a", "team-b")
    a = next(q for q in cluster.quotas if q.name == "team-a")
    assert (a.min.gpu, a.min.cpu, a.min.memory, a.strategy) == (
        12,
        96_000,
        768 * 1024,
        "BestEffortFIFO",
    )
    assert a.parent_id == cluster.quota_id("root")


def test_it_puts_a_node_list_under_the_cluster_files_quotas(tmp_path):
    cluster = read_cluster_file(write(tmp_path, "c.toml", CLUSTER), nodes=nodes(4, 4, 8))
    assert cluster.gpus == 16 and {n.pool_id for n in cluster.nodes} == {1}
    assert {q.pool_id for q in cluster.quotas} == {1}
    # the roots' guarantee must fit the node list, as it must fit a pool's nodes
    says = "quotas.root.min.gpu: the root quotas of pool 'node list' guarantee 16 GPU"
    with pytest.raises(ClusterError, match=re.escape(says)):
        read_cluster_file(write(tmp_path, "c.toml", CLUSTER), nodes=nodes(4, 4, 4))


def test_it_reads_the_demo_cluster_file():
    cluster = read_cluster_file("examples/demo-cluster.toml")
    assert cluster.gpus == 32 + 16
    assert set(cluster.leaves) == {"team-a", "team-b", "research", "lingjun-a", "lingjun-research"}


def test_it_names_the_place_of_a_bad_quota(tmp_path):
    bad = CLUSTER.replace('parent = "root"\nmin = { gpu = 4', 'parent = "nobody"\nmin = { gpu = 4')
    with pytest.raises(ClusterError, match="quotas.team-b.parent: unknown quota 'nobody'"):
        read_cluster_file(write(tmp_path, "c.toml", bad))


def test_it_assigns_quotas_by_hash_and_by_class():
    cluster = made_up_cluster(nodes(8, 8), quotas=["LS", "BE"])
    assert assign_quota(job("x", 0, qos="BE"), cluster, "qos") == "BE"
    hashed = {assign_quota(job(f"j{i}", 0), cluster, "hash") for i in range(50)}
    assert hashed == {"LS", "BE"}
    assert assign_quota(job("j7", 0), cluster, "hash") == assign_quota(
        job("j7", 0), cluster, "hash"
    )
    with pytest.raises(ClusterError, match="unknown quota"):
        assign_quota(job("y", 0, quota="nope"), cluster, "hash")


def test_it_splits_a_made_up_cluster_into_equal_quotas():
    cluster = made_up_cluster(nodes(8, 8, 8), quotas=3)
    assert [q.min.gpu for q in cluster.quotas] == [24, 8, 8, 8]
    assert made_up_cluster(nodes(8)).leaves == ("cluster",)


def test_it_parses_policies_with_options():
    ours, custom = parse_policies("ours, kueue+ckpt=600+min_run=0+placement=worst-fit")
    assert ours.victim_order == "least_lost_work" and ours.placement == "best_fit"
    assert custom.name == "kueue+ckpt=600+min_run=0+placement=worst-fit"
    assert (custom.victim_order, custom.placement) == ("kueue", "worst_fit")
    assert (custom.checkpoint_interval, custom.min_run_seconds) == (600, 0)
    assert parse_policies("ours+name=mine")[0].name == "mine"


@pytest.mark.parametrize(
    "text, message",
    [
        ("best", "unknown policy"),
        ("ours,ours", "names repeat"),
        ("ours+victims=oldest", "not one of"),
        ("ours+ckpt=-1", "≥ 0"),
        ("ours+ckpt=inf", "a finite number"),  # JSON has no Infinity: the summary holds it
        ("ours+min_run=nan", "a finite number"),
        ("ours+colour=red", "unknown key"),
    ],
)
def test_it_rejects_bad_policies(text, message):
    with pytest.raises(PolicyError, match=message):
        parse_policies(text)


def test_it_checks_a_cluster_file_by_apply_clusters_rules(tmp_path):
    """A file `apply_cluster` would refuse is refused with its message, every problem named."""
    bad = CLUSTER.replace("min = { gpu = 4,", "min = { gpu = 5,").replace(
        'kind = "public"', 'kind = "shared"'
    )
    _, problems = cluster_file_check(tomllib.loads(bad))
    assert len(problems) == 2
    with pytest.raises(ClusterError) as refused:
        read_cluster_file(write(tmp_path, "c.toml", bad))
    assert str(refused.value) == "; ".join(problems)
    assert "quotas.root.min.gpu: the children's min adds up to 17 GPU" in str(refused.value)
    with pytest.raises(ClusterError, match=re.escape("quota: unknown section")):
        read_cluster_file(write(tmp_path, "typo.toml", CLUSTER + '[quota.x]\npool = "p"\n'))


def test_it_leaves_out_what_a_replay_does_not_read(tmp_path):
    """Users (whose password_env need not be set here), keys, images and the market."""
    extra = '[users.ann]\npassword_env = "NOT_SET_ANYWHERE"\n[market]\nfloor_ratio = 7\n'
    cluster = read_cluster_file(write(tmp_path, "c.toml", CLUSTER + extra))
    assert cluster.leaves == ("team-a", "team-b")


def test_it_counts_the_problems_it_does_not_name(tmp_path):
    many = "".join(f'[quotas.q{i}]\nparent = "nobody"\n' for i in range(8))
    with pytest.raises(ClusterError, match=r"unknown quota 'nobody' \(and 3 more\)$"):
        read_cluster_file(write(tmp_path, "c.toml", CLUSTER + many))


def test_the_simulator_runs_without_django():
    """It reads cluster files with the cluster app's pure checker, and nothing of Django."""
    code = (
        "import sys; import apps.simulator; import apps.simulator.cluster; "
        "assert 'apps.cluster.clusterfile' in sys.modules; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'celery')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
