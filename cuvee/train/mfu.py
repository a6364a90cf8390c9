"""Model FLOPs utilisation: achieved model FLOPs / the accelerator's peak dense bf16 FLOPs.

FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B), forward + backward:

    6 * N  +  12 * n_layers * dim * seq_len

where N is the non-embedding parameter count *including* the output projection (a matmul per token),
and the second term is attention's QK^T and AV matmuls at full sequence length (the convention: neither
causal nor document masking is discounted, so numbers compare with other codebases).
"""

from __future__ import annotations

import os

# Dense (no sparsity) bf16 tensor-core peak per GPU, from the vendors' datasheets. First match wins.
PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("GH200", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("RTX 4090", 165e12),
    ("V100", 125e12),  # fp16
]


def peak_flops(device_name: str | None) -> float | None:
    """Peak FLOPs of one device, or None (CPU / unknown GPU: MFU is then not reported).

    ``CUVEE_PEAK_FLOPS`` overrides the table (e.g. a GPU that is not listed)."""
    if os.environ.get("CUVEE_PEAK_FLOPS"):
        return float(os.environ["CUVEE_PEAK_FLOPS"])
    if not device_name:
        return None
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def flops_per_token(n_params_non_embedding: int, n_layers: int, dim: int, seq_len: int) -> float:
    return 6.0 * n_params_non_embedding + 12.0 * n_layers * dim * seq_len


def mfu(tokens_per_s_per_device: float, flops_token: float, peak: float | None) -> float | None:
    return None if not peak else tokens_per_s_per_device * flops_token / peak
