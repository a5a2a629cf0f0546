"""Sizes the platform takes, checked where they are declared (a job's spec, the cluster
file, the simulator's traces) so that a typo is an error naming its place, not a process that
fills the memory. Pure: no Django."""

MAX_NODE_GPUS = 128  # GPUs on one node: the scheduler keeps a shared pool's one by one
MAX_NODES = 100_000  # nodes in one file (the planner is measured up to 20,000)
MAX_PODS_PER_ROLE = 1000  # pods of one role of a job (a single-role trace job: its pods)
