"""The Swarm worker: the SAPO engine (rollouts, GRPO trainer, agent loop) and the volunteer client.

Nothing in this package imports Django: volunteers install it without the coordinator.
"""

__version__ = "0.1.0"
