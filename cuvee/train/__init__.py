"""Trainer: packed document-masked loader over mixer shards, Llama-style model with HF export, training
loop (tokens/s, MFU, exact resume, FSDP2), and ``cuvee anneal`` data ablations.

Modules: config (YAML -> pydantic), shards (open mixer output), permutation (O(1)-memory shuffle),
loader (packed batches + state), attention (SDPA / FlexAttention / varlen document masks), model,
schedule, mfu, checkpoint, distributed (torchrun + FSDP2), trainer, step (the one optimizer step, also the
mix-search proxies'), evaluate (loss, bpb), anneal, hf_export + hf_tokenizer, demo_data (byte-level shards), cli.
Heavy imports (torch) happen only when these modules are imported, never from the stage registry.
"""
