"""A cluster of hosts on one machine: network namespaces on a private bridge, running the stack's services."""

from .cluster import Cluster, HostStatus
from .topology import ClusterSpec, Host

__all__ = ["Cluster", "ClusterSpec", "Host", "HostStatus"]
