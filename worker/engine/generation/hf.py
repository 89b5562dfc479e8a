"""Generation with transformers' ``generate``: batched, left-padded, n samples per prompt.

Sampling is plain multinomial sampling at ``temperature`` with top_k=0 and top_p=1.0, so the
sampler's distribution is exactly softmax(logits / temperature), the one the learner scores
(transformers would otherwise apply top_k=50 from its generation defaults). The backend shares
the policy's module, so weight sync is a no-op; on a GPU it samples under the learner's bf16
autocast (worker/engine/policy.py), so the sampler is the learner in kernels too.
"""

from __future__ import annotations

import torch

from worker.engine.generation.base import Sample
from worker.engine.policy import default_autocast_dtype


class TransformersBackend:
    name = "transformers"

    def __init__(self, model: torch.nn.Module, tokenizer, max_batch_sequences: int = 256) -> None:
        self.model = model
        self.tokenizer = tokenizer
        # Upper bound on prompts x n per generate call; larger requests are split.
        self.max_batch_sequences = max_batch_sequences

    def generate(
        self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, seed: int
    ) -> list[list[Sample]]:
        prompts_per_call = max(1, self.max_batch_sequences // n)
        results: list[list[Sample]] = []
        for start in range(0, len(prompts), prompts_per_call):
            chunk = prompts[start : start + prompts_per_call]
            results.extend(self._generate(chunk, n, max_new_tokens, temperature, seed + start))
        return results

    @torch.no_grad()
    def _generate(
        self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, seed: int
    ) -> list[list[Sample]]:
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        enc = tok(
            prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(device)
        was_training = self.model.training
        self.model.eval()
        # A private RNG stream: generation must not move the global RNG the trainer relies on.
        autocast = default_autocast_dtype(self.model)
        with (
            torch.random.fork_rng(devices=[device] if device.type == "cuda" else []),
            torch.autocast(device.type, dtype=autocast, enabled=autocast is not None),
        ):
            torch.manual_seed(seed)
            sequences = self.model.generate(
                **enc,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        if was_training:
            self.model.train()
        completions = sequences[:, enc["input_ids"].shape[1] :].tolist()  # [len(prompts) * n, T']
        samples = [self._sample(ids) for ids in completions]
        return [samples[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _sample(self, ids: list[int]) -> Sample:
        eos = self.tokenizer.eos_token_id
        finished = eos in ids
        if finished:
            ids = ids[: ids.index(eos) + 1]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Sample(token_ids=ids, text=text, finished=finished)

    def sync_weights(self, model: torch.nn.Module) -> None:
        if model is not self.model:
            raise ValueError("the transformers backend generates with the policy module itself")
