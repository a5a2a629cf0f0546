"""A job's namespace name on a host, and back: what an agent's start-up sweep reads to tell
its own installation's namespaces on its host from any other's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apps.agent import netns

job_ids = st.from_regex(r"dlc[0-9a-f]{1,14}", fullmatch=True)  # as jobs name themselves
hosts = st.sampled_from(["", "10.231.0.11", "10.231.0.12", "gpu-node-0"])


@given(job_ids, hosts)
def test_a_namespace_names_its_job_on_its_own_host(job_id, host):
    assert netns.job_of(netns.name_for(job_id, host), host) == job_id


@given(job_ids, hosts, hosts)
def test_another_hosts_namespace_names_no_job_of_this_host(job_id, host, other):
    name = netns.name_for(job_id, other)
    found = netns.job_of(name, host)
    assert found == "" or netns.name_for(found, host) == name
    if host and host != other:
        assert found == ""


def test_names_not_of_a_job_name_none():
    assert netns.job_of("paiweb-") == ""
    assert netns.job_of("other-dlc123") == ""
    assert netns.job_of("paiweb-dlc123", "10.231.0.11") == ""  # no host suffix: not this host's
