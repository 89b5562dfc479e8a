"""The torch-free layer: what the coordinator and the worker both need.

The protocol and its messages, the rollout record, the campaign config and the learner's
settings, the arms, the model tiers, questions and their verifiers, batch sampling, group
advantages and the study's statistics. Imports no torch, transformers or vllm, and no Django
(enforced by the import-linter contracts in pyproject.toml).
"""
