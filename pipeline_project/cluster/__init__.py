"""A cluster of hosts on one machine: network namespaces on a private bridge, running the stack's services."""

from pipeline_project.cluster.cluster import Cluster, HostStatus
from pipeline_project.cluster.topology import ClusterSpec, Host

__all__ = ["Cluster", "ClusterSpec", "Host", "HostStatus"]
