"""Small Llama-style decoder: RMSNorm, RoPE (configurable theta), SwiGLU MLP, grouped-query attention.

Parameter names and the RoPE layout (rotate-half, as in HF ``LlamaForCausalLM``) are chosen so that the
export in :mod:`cuvee.train.hf_export` is a pure renaming: no permutation of q/k weights is needed.
Packed batches carry ``position_ids`` that restart at every document, and a :class:`DocMask`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from cuvee.train.attention import DocMask, build_doc_mask, doc_attention
from cuvee.train.config import ModelConfig

IGNORE_INDEX = -100


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # normalise in fp32 like HF Llama, then cast back (matters under bf16 autocast)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for arbitrary (per-token) positions: (B, 1, S, D), rotate-half layout."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim))
    freqs = position_ids.float()[..., None] * inv_freq  # (B, S, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos.to(x.dtype)) + (rotated * sin.to(x.dtype))


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin, mask: DocMask, backend: str):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = doc_attention(q, k, v, mask, backend)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.down_proj = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, cos, sin, mask, backend):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self):
        """Normal(0, std) init; residual output projections scaled by 1/sqrt(2 * n_layers) (GPT-2)."""
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * self.cfg.n_layers))
            else:
                nn.init.normal_(p, 0.0, std)

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count; ``exclude_embeddings`` drops the input lookup table (no FLOPs) unless it is tied
        to the output head (then it is a real matmul per token and stays counted)."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings and not self.cfg.tie_embeddings:
            n -= self.embed_tokens.weight.numel()
        return n

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        doc_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        backend: str = "sdpa",
        mask: DocMask | None = None,
        reduction: str = "mean",
        loss_chunk_tokens: int = 0,
    ):
        """Logits (B, S, V), or the cross-entropy if ``labels`` are given (IGNORE_INDEX positions skipped).

        Without ``doc_ids`` every row is one document; without ``position_ids`` positions are 0..S-1.
        ``loss_chunk_tokens``: compute head + loss in chunks of this many tokens, recomputing each chunk's
        logits in backward, so (B*S, vocab) fp32 logits never exist at once (GB-scale with a 100k vocab).
        """
        b, s = input_ids.shape
        if doc_ids is None:
            doc_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
        if mask is None:
            mask = build_doc_mask(doc_ids, backend)
        cos, sin = rope_cos_sin(position_ids, self.cfg.head_dim, self.cfg.rope_theta)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, backend)
        h = self.norm(x)
        if labels is None:
            return self.lm_head(h)
        if loss_chunk_tokens and reduction != "none" and h.shape[0] * h.shape[1] > loss_chunk_tokens:
            return self._chunked_loss(h, labels, loss_chunk_tokens, reduction)
        logits = self.lm_head(h)
        return F.cross_entropy(
            logits.float().view(-1, logits.shape[-1]), labels.view(-1), ignore_index=IGNORE_INDEX, reduction=reduction
        )

    def _chunked_loss(self, h: torch.Tensor, labels: torch.Tensor, chunk: int, reduction: str) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        def chunk_loss(hc, lc):
            return F.cross_entropy(self.lm_head(hc).float(), lc, ignore_index=IGNORE_INDEX, reduction="sum")

        hf, lf = h.reshape(-1, h.shape[-1]), labels.reshape(-1)
        total = sum(checkpoint(chunk_loss, hf[i : i + chunk], lf[i : i + chunk], use_reentrant=False)
                    for i in range(0, hf.shape[0], chunk))
        return total if reduction == "sum" else total / (lf != IGNORE_INDEX).sum().clamp(min=1)
