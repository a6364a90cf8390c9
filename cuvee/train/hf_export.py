"""Export to the Hugging Face Llama format (config.json + model.safetensors) for transformers and
lm-evaluation-harness (``lm_eval --model hf --model_args pretrained=<dir>``).

cuvee's parameter names mirror HF's (``model.`` prefix aside) and RoPE uses the same rotate-half layout,
so the export is a renaming. Logit equality with ``LlamaForCausalLM`` is tested.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from cuvee.train.config import ModelConfig

log = logging.getLogger(__name__)


def hf_config(cfg: ModelConfig, tokenizer: dict | None = None):
    from transformers import LlamaConfig

    tok = tokenizer or {}
    eos = tok.get("eos_id")
    return LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.dim,
        intermediate_size=cfg.hidden_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=eos,
        eos_token_id=eos,
        initializer_range=cfg.init_std,
        torch_dtype="float32",
    )


def to_hf_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in state_dict.items():
        name = name.removeprefix("_orig_mod.")
        out[name if name.startswith("lm_head.") else f"model.{name}"] = tensor.detach().cpu().contiguous()
    return out


def export_hf(model_or_state, cfg: ModelConfig, out_dir: str | Path, tokenizer: dict | None = None,
              dtype: torch.dtype = torch.float32) -> Path:
    """Write a ``LlamaForCausalLM`` directory; ``model_or_state`` is a :class:`Llama` or its state dict."""
    from transformers import LlamaForCausalLM

    sd = model_or_state.state_dict() if hasattr(model_or_state, "state_dict") else model_or_state
    out_dir = Path(out_dir)
    hf = LlamaForCausalLM(hf_config(cfg, tokenizer))
    missing, unexpected = hf.load_state_dict(to_hf_state_dict(sd), strict=False)
    missing = [m for m in missing if not (cfg.tie_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"HF export mismatch: missing {missing}, unexpected {unexpected}")
    hf.to(dtype).save_pretrained(out_dir)
    if tokenizer:
        from cuvee.train.hf_tokenizer import export_tokenizer

        (out_dir / "cuvee_tokenizer.json").write_text(json.dumps(tokenizer, indent=2))
        if not export_tokenizer(tokenizer, out_dir):
            log.warning("no Hugging Face tokenizer written for tokenizer kind %r", tokenizer.get("kind"))
    return out_dir


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """HF export straight from a cuvee checkpoint file or run directory, into a folder cuvee owns.

    The folder is claimed as kind "eval" (an export exists to be evaluated; a folder holding someone else's
    files is refused), locked while written, emptied and written whole, and bound to the checkpoint it was
    exported from (``.cuvee-plan.json``), so it never mixes two exports and always says which one it holds."""
    from cuvee.kernel.workdir import Workdir, owned
    from cuvee.train.checkpoint import checkpoint_identity, load_checkpoint

    state = load_checkpoint(checkpoint)  # a crafted checkpoint is refused before any folder is made
    binding = {"export_of": checkpoint_identity(checkpoint)}
    with owned(out_dir, Workdir("eval", "Hugging Face export folder"), binding, fresh=True) as opened:
        return export_hf(state["model"], ModelConfig(**state["model_config"]), opened.folder, state.get("tokenizer"))
