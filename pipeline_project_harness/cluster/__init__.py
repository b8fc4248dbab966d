"""Trials on the network-namespace cluster (`pipeline_project.cluster`): multi-node training and host faults."""
