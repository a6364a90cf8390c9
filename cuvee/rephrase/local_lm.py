"""A local Hugging Face causal LM that rewrites a batch of prompts per forward pass, with finish reasons.

annotate's :class:`~cuvee.classifiers.annotate.LocalLM` answers one short prompt at a time; rewriting
whole documents is generation-bound, so prompts are left-padded into batches (one ``generate`` call per
batch). Loading and prompt encoding are annotate's (``load_causal_lm``, ``encode_prompt``: no remote code,
local folders stay local). Each answer says why it ended, as a server would: ``stop`` when the model
emitted its end-of-sequence token, ``length`` when ``max_new_tokens`` cut it.
"""

from __future__ import annotations

from cuvee.classifiers.llm_http import Completion


class BatchLocalLM:
    """Greedy by default; ``temperature`` > 0 samples (``top_p``, seeded once with ``seed``)."""

    concurrency = 1

    def __init__(self, model: str, max_new_tokens: int = 512, batch_size: int = 8, device: str = "auto",
                 temperature: float = 0.0, top_p: float | None = None, seed: int | None = None):
        from cuvee.classifiers.annotate import load_causal_lm

        self.name = model
        self.max_new_tokens = max_new_tokens
        self.batch_size = max(1, batch_size)
        self.temperature = temperature
        self.top_p = top_p
        self.model, self.tok = load_causal_lm(model, device)
        self.eos = self.tok.eos_token_id if self.tok.eos_token_id is not None else self.model.config.eos_token_id
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos
        if self.pad is None:
            self.pad = 0
        if seed is not None and temperature > 0:
            import torch

            torch.manual_seed(seed)

    @property
    def tokenizer(self):
        return self.tok

    def complete_many(self, prompts: list[str]) -> list[Completion]:
        from cuvee.classifiers.annotate import encode_prompt

        out: list[Completion] = []
        for s in range(0, len(prompts), self.batch_size):
            out.extend(self._generate([encode_prompt(self.tok, p) for p in prompts[s : s + self.batch_size]]))
        return out

    def complete(self, prompt: str) -> Completion:
        return self.complete_many([prompt])[0]

    def _generate(self, batch: list[list[int]]) -> list[Completion]:
        import torch

        device = next(self.model.parameters()).device
        width = max(len(ids) for ids in batch)
        x = torch.full((len(batch), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, ids in enumerate(batch):  # left padding: every prompt ends where generation starts
            x[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[i, width - len(ids):] = 1
        sampling = {"do_sample": True, "temperature": self.temperature, **({"top_p": self.top_p} if self.top_p else {})} \
            if self.temperature > 0 else {"do_sample": False}
        with torch.inference_mode():
            gen = self.model.generate(input_ids=x.to(device), attention_mask=mask.to(device),
                                      max_new_tokens=self.max_new_tokens, num_beams=1, pad_token_id=self.pad,
                                      eos_token_id=self.eos, **sampling)
        results = []
        for i, ids in enumerate(batch):
            new = gen[i, width:].tolist()
            stop = self.eos is not None and self.eos in new
            if stop:
                new = new[: new.index(self.eos) + 1]
            text = self.tok.decode(new, skip_special_tokens=True)
            results.append(Completion(text, len(ids), len(new), 0, "stop" if stop else "length"))
        return results
