"""The doctor (worker/engine/hardware.py): a CUDA torch that sees no GPU beside a loaded driver is
named as a driver/CUDA mismatch with its fix, not "No GPU found"; the disk check asks for the
largest trainable tier's checkpoints, whose size is measured on a real one."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from worker.engine.checkpoint import checkpoint_bytes, save_checkpoint
from worker.engine.hardware import MIN_DRIVER, doctor_checks
from worker.engine.trainer import GRPOLearner, TrainSample
from worker.shared.config import GRPOConfig
from worker.shared.hardware import GIB, Hardware
from worker.shared.tiers import tier


def machine(device: str, vram_gib: float = 0, disk_gib: float = 100) -> Hardware:
    return Hardware(
        device=device,
        device_name="NVIDIA A100" if device == "cuda" else "x86_64",
        vram_bytes=int(vram_gib * GIB),
        ram_bytes=64 * GIB,
        cpu_count=8,
        disk_free_bytes=int(disk_gib * GIB),
        backends=["transformers"],
        torch="2.13.0+cu130",
    )


def test_a_cuda_torch_on_an_old_driver_is_named_with_its_fix():
    checks = {
        c.name: c
        for c in doctor_checks(machine("cpu"), torch_cuda="13.0", nvidia_gpu=True, driver="570.86.15")
    }
    assert not checks["torch"].ok
    advice = checks["torch"].advice
    assert "CUDA 13.0" in advice and MIN_DRIVER["13"] in advice and "570.86.15" in advice
    assert "Update the driver" in advice
    assert "No GPU found" not in checks["device"].advice and "see torch" in checks["device"].advice
    # a new enough driver and still no GPU: a different cause, said so, still not "No GPU found"
    other = {
        c.name: c
        for c in doctor_checks(machine("cpu"), torch_cuda="13.0", nvidia_gpu=True, driver="580.95.05")
    }
    assert not other["torch"].ok and "nvidia-smi" in other["torch"].advice
    assert "needs NVIDIA driver" not in other["torch"].advice
    # the driver's GPU seen by torch: nothing to say
    seen = {c.name: c for c in doctor_checks(machine("cuda", 80), torch_cuda="13.0", nvidia_gpu=True)}
    assert seen["torch"].ok and not seen["torch"].advice


def test_the_disk_check_holds_the_largest_tiers_checkpoints():
    """An 80 GB card trains qwen2.5-1.5b: two 17 GiB checkpoints and its 2.9 GiB download do not
    fit 30 GiB (the old check asked for 5); a CPU machine's tiers need far less."""
    needed = (2 * checkpoint_bytes(tier("qwen2.5-1.5b").params) + 2 * tier("qwen2.5-1.5b").params) / GIB
    gpu = {
        c.name: c for c in doctor_checks(machine("cuda", 80, disk_gib=30), torch_cuda="13.0", nvidia_gpu=True)
    }
    assert not gpu["disk"].ok
    assert "qwen2.5-1.5b" in gpu["disk"].detail and f"{needed:.1f} GiB" in gpu["disk"].detail
    assert f"{needed:.0f} GiB" in gpu["disk"].advice
    roomy = {
        c.name: c for c in doctor_checks(machine("cuda", 80, disk_gib=40), torch_cuda="13.0", nvidia_gpu=True)
    }
    assert roomy["disk"].ok
    small = {
        c.name: c for c in doctor_checks(machine("cuda", 16, disk_gib=30), torch_cuda="13.0", nvidia_gpu=True)
    }
    assert small["disk"].ok and "qwen2.5-0.5b" in small["disk"].detail
    cpu = {c.name: c for c in doctor_checks(machine("cpu", disk_gib=2), torch_cuda=None, nvidia_gpu=False)}
    assert cpu["disk"].ok and "tiny-20m" in cpu["disk"].detail


def test_checkpoint_bytes_is_what_a_checkpoint_takes(tmp_path):
    """A real checkpoint after a real step (fp32 weights, AdamW's moments allocated)."""
    config = Qwen2Config(
        vocab_size=2048, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    learner = GRPOLearner(model, GRPOConfig(learning_rate=1e-3), 0)
    learner.step(
        [TrainSample([5, 6, 7], [8, 9], advantage=1.0), TrainSample([5, 6, 7], [10], advantage=-1.0)]
    )
    path = tmp_path / "node.pt"
    save_checkpoint(path, model, learner.optimizer, {"round": 1})
    params = sum(p.numel() for p in model.parameters())
    size = path.stat().st_size
    print(f"{params} parameters: checkpoint {size} bytes, estimate {checkpoint_bytes(params)}")
    assert checkpoint_bytes(params) <= size <= 1.05 * checkpoint_bytes(params)
