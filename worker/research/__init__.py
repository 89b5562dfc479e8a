"""Research on the engine without a coordinator: the in-process simulator (``swarm-worker
simulate``). The studies built on it are the lab's (lab/swarm_lab/). Depends on worker.engine and
worker.shared."""
