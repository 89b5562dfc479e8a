"""The RL engine: loss, log-probs, the GRPO trainer, the SAPO round loop of one agent and its
transport interface, checkpoints, generation backends, the offline-built tiny models and
policy loading. Imports torch; depends only on worker.shared."""
