"""A local Hugging Face causal LM as an LLM job backend: batches of prompts per ``generate`` call, with finish reasons.

Rewriting whole documents is generation-bound, so prompts are left-padded into batches; annotation asks for
batches of one, so its answers equal a server's (``cuvee.classifiers.llm_server`` serves :func:`generate` too).
Loading goes through :func:`cuvee.hf_loading.pretrained` (no remote code, local folders stay local). Each answer
says why it ended, as a server would: ``stop`` when the model emitted its end-of-sequence token, ``length`` when
``max_new_tokens`` cut it.
"""

from __future__ import annotations

from cuvee.llm.backend import Completion, LLMError


def encode_prompt(tok, prompt: str) -> list[int]:
    """Token ids of a single-user-message prompt: the chat template when the tokenizer has one, else plain text."""
    if getattr(tok, "chat_template", None):
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids)
    return list(tok(prompt)["input_ids"])


def messages_to_prompt(messages: list[dict]) -> str:
    """Plain-text prompt for a tokenizer without a chat template (one user message = its content)."""
    return "\n\n".join(str(m.get("content") or "") for m in messages)


def load_causal_lm(model: str, device: str = "auto"):
    """A local folder or (where the user named one and is online) a hub causal LM and its tokenizer, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cuvee.hf_loading import ModelLoadError, pretrained

    try:
        tok = pretrained(AutoTokenizer, model)
        lm = pretrained(AutoModelForCausalLM, model)
    except ModelLoadError as e:
        raise LLMError(f"cannot load causal LM: {e}") from None
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return lm.to(device).eval(), tok


def generate(model, tok, batch: list[list[int]], max_new_tokens: int, sampling: dict | None = None) -> list[Completion]:
    """One ``generate`` call over left-padded prompts (token ids); greedy unless ``sampling`` says otherwise."""
    import torch

    eos = tok.eos_token_id if tok.eos_token_id is not None else model.config.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos if eos is not None else 0
    device = next(model.parameters()).device
    width = max(len(ids) for ids in batch)
    x = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, ids in enumerate(batch):  # left padding: every prompt ends where generation starts
        x[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        mask[i, width - len(ids):] = 1
    with torch.inference_mode():
        gen = model.generate(input_ids=x.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
                             num_beams=1, pad_token_id=pad, eos_token_id=eos, **(sampling or {"do_sample": False}))
    results = []
    for i, ids in enumerate(batch):
        new = gen[i, width:].tolist()
        stop = eos is not None and eos in new
        if stop:
            new = new[: new.index(eos) + 1]
        results.append(Completion(tok.decode(new, skip_special_tokens=True), len(ids), len(new), 0,
                                  "stop" if stop else "length"))
    return results


class LocalLM:
    """Greedy by default; ``temperature`` > 0 samples (``top_p``, seeded once with ``seed``)."""

    api = "local"
    concurrency = 1

    def __init__(self, model: str, max_new_tokens: int = 512, batch_size: int = 1, device: str = "auto",
                 temperature: float = 0.0, top_p: float | None = None, seed: int | None = None):
        self.name = model
        self.max_new_tokens = max_new_tokens
        self.batch_size = max(1, batch_size)
        self.sampling = {"do_sample": True, "temperature": temperature, **({"top_p": top_p} if top_p else {})} \
            if temperature > 0 else {"do_sample": False}
        self.model, self.tokenizer = load_causal_lm(model, device)
        if seed is not None and temperature > 0:
            import torch

            torch.manual_seed(seed)

    def complete_many(self, prompts: list[str]) -> list[Completion]:
        out: list[Completion] = []
        for s in range(0, len(prompts), self.batch_size):
            batch = [encode_prompt(self.tokenizer, p) for p in prompts[s : s + self.batch_size]]
            out.extend(generate(self.model, self.tokenizer, batch, self.max_new_tokens, self.sampling))
        return out
