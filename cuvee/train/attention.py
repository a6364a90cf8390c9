"""Document-masked causal attention: tokens attend only to earlier tokens of the *same* document.

Three interchangeable backends, all taking ``q, k, v`` as ``(B, H, S, D)`` and a :class:`DocMask`:

* ``sdpa``   - reference: SDPA with an explicit ``(B, 1, S, S)`` block-diagonal causal boolean mask.
               Works everywhere (CPU forward + backward) but materialises S^2 booleans per row.
* ``flex``   - FlexAttention with a ``BlockMask`` built from a document ``mask_mod``; fully masked
               blocks are skipped, so cost tracks sum(len_doc^2) instead of S^2. GPU for training
               (FlexAttention has no CPU backward); the CPU forward is used in tests.
* ``varlen`` - FlashAttention varlen kernel over ``cu_seqlens`` (``torch.nn.attention.varlen`` in
               torch >= 2.10, else the ``flash_attn`` package). CUDA only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F


@dataclass
class DocMask:
    """Everything the backends need about document boundaries in a packed batch."""

    doc_ids: torch.Tensor  # (B, S) int: document index, unique within a row
    cu_seqlens: torch.Tensor | None = None  # (N+1,) int32 over the flattened B*S tokens (varlen)
    max_seqlen: int = 0
    block_mask: object | None = None  # FlexAttention BlockMask (built once per batch, shared by layers)
    dense_mask: torch.Tensor | None = None  # (B, 1, S, S) bool (sdpa)


def cu_seqlens_from_doc_ids(doc_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Boundaries of every document segment in the flattened batch (row ends always cut)."""
    b, s = doc_ids.shape
    starts = torch.ones_like(doc_ids, dtype=torch.bool)
    starts[:, 1:] = doc_ids[:, 1:] != doc_ids[:, :-1]
    idx = torch.nonzero(starts.flatten(), as_tuple=False).flatten().to(torch.int32)
    cu = torch.cat([idx, torch.tensor([b * s], dtype=torch.int32, device=idx.device)])
    max_len = int((cu[1:] - cu[:-1]).max().item()) if cu.numel() > 1 else 0
    return cu, max_len


def resolve_backend(name: str, device: torch.device) -> str:
    """``auto`` picks the fastest backend the device supports."""
    if name != "auto":
        if name == "varlen" and device.type != "cuda":
            raise ValueError("attention backend 'varlen' needs a CUDA device")
        return name
    if device.type != "cuda":
        return "sdpa"
    return "flex"


def build_doc_mask(doc_ids: torch.Tensor, backend: str) -> DocMask:
    """Precompute the mask structure for one batch (once, not per layer)."""
    mask = DocMask(doc_ids=doc_ids)
    b, s = doc_ids.shape
    if backend == "sdpa":
        causal = torch.ones(s, s, dtype=torch.bool, device=doc_ids.device).tril()
        same_doc = doc_ids[:, :, None] == doc_ids[:, None, :]
        mask.dense_mask = (same_doc & causal)[:, None]
    elif backend == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        def document_causal(b_idx, h_idx, q_idx, kv_idx):
            return (doc_ids[b_idx, q_idx] == doc_ids[b_idx, kv_idx]) & (q_idx >= kv_idx)

        # on GPU, compile the mask construction so the (B, S, S) boolean grid is never materialised
        mask.block_mask = create_block_mask(document_causal, b, None, s, s, device=doc_ids.device,
                                            _compile=doc_ids.is_cuda)
    elif backend == "varlen":
        mask.cu_seqlens, mask.max_seqlen = cu_seqlens_from_doc_ids(doc_ids)
    else:
        raise ValueError(f"unknown attention backend {backend!r}")
    return mask


@lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def _varlen_fn():
    try:
        from torch.nn.attention.varlen import varlen_attn

        return "torch", varlen_attn
    except ImportError:
        pass
    try:
        from flash_attn import flash_attn_varlen_func

        return "flash_attn", flash_attn_varlen_func
    except ImportError as e:
        raise RuntimeError("varlen attention needs torch>=2.10 or the flash_attn package") from e


def _torch_varlen_args(fn) -> tuple[dict, bool]:
    """How this torch's ``varlen_attn`` asks for causal masking and GQA: torch 2.10 takes ``is_causal``,
    later releases ``window_size=(-1, 0)``; ``enable_gqa`` is not in every release."""
    import inspect

    params = inspect.signature(fn).parameters
    if "window_size" in params:
        causal = {"window_size": (-1, 0)}
    elif "is_causal" in params:
        causal = {"is_causal": True}
    else:
        raise RuntimeError(f"torch.nn.attention.varlen.varlen_attn{inspect.signature(fn)}: no causal option known to cuvee")
    return causal, "enable_gqa" in params


def doc_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: DocMask, backend: str) -> torch.Tensor:
    """Attention restricted to (causal, same-document) pairs. q: (B, Hq, S, D), k/v: (B, Hkv, S, D)."""
    gqa = q.shape[1] != k.shape[1]
    if backend == "sdpa":
        if gqa:  # explicit repeat: SDPA's enable_gqa path is not available for every CPU kernel
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense_mask)
    if backend == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        if q.is_cuda and not torch.compiler.is_compiling():  # inside a compiled block dynamo lowers it itself
            return _compiled_flex()(q, k, v, block_mask=mask.block_mask, enable_gqa=gqa)

        return flex_attention(q, k, v, block_mask=mask.block_mask, enable_gqa=gqa)
    if backend == "varlen":
        b, hq, s, d = q.shape

        def flat(t):
            return t.transpose(1, 2).reshape(b * s, t.shape[1], d)

        kind, fn = _varlen_fn()
        cu, mx = mask.cu_seqlens, mask.max_seqlen
        if kind == "torch":
            causal, takes_gqa = _torch_varlen_args(fn)
            if gqa and not takes_gqa:  # older varlen_attn: give every query head its own k/v head
                rep = hq // k.shape[1]
                k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            out = fn(flat(q), flat(k), flat(v), cu, cu, mx, mx, **causal, **({"enable_gqa": gqa} if takes_gqa else {}))
        else:
            out = fn(flat(q), flat(k), flat(v), cu, cu, mx, mx, causal=True)
        return out.reshape(b, s, hq, d).transpose(1, 2)
    raise ValueError(f"unknown attention backend {backend!r}")
