"""Hugging Face tokenizer files for exported models, so transformers / lm-evaluation-harness tokenize the
text exactly as the mixer did. Supported: tiktoken encodings (via transformers' TikTokenConverter, fed the
in-memory ranks so no download or blobfile is needed) and cuvee's byte-level demo tokenizer."""

from __future__ import annotations

from pathlib import Path


def _tiktoken_tokenizer(block: dict):
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from cuvee.mixer.tokenizers import manifest_tokenizer

    enc = manifest_tokenizer(block).enc  # an encoding name, or a shipped rank file (bytes256) of that fingerprint

    class _InMemory(TikTokenConverter):
        def load_tiktoken_bpe(self, _url):
            return enc._mergeable_ranks

    conv = _InMemory(vocab_file="-", pattern=enc._pat_str)
    vocab, merges = conv.extract_vocab_merges_from_model("-")
    vocab.update(enc._special_tokens)  # keep tiktoken's ids for special tokens (there may be gaps)
    tok = Tokenizer(BPE(vocab, merges, fuse_unk=False))
    if hasattr(tok.model, "ignore_merges"):
        tok.model.ignore_merges = True
    base = conv.converted()  # for its pre-tokenizer / decoder (split pattern + byte level)
    tok.pre_tokenizer, tok.decoder = base.pre_tokenizer, base.decoder
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in enc._special_tokens])
    eos = next((t for t, i in enc._special_tokens.items() if i == enc.eot_token), None)
    return tok, eos


def _byte_tokenizer(eos_id: int):
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: b for b, ch in bytes_to_unicode().items()}  # token id == byte value
    vocab["<|endoftext|>"] = eos_id
    tok = Tokenizer(BPE(vocab, [], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return tok, "<|endoftext|>"


def export_tokenizer(tokenizer: dict, out_dir: str | Path) -> bool:
    """Write tokenizer.json + tokenizer_config.json for the manifest's tokenizer; False if unsupported."""
    from transformers import PreTrainedTokenizerFast

    kind = tokenizer.get("kind")
    if kind == "tiktoken":
        tok, eos = _tiktoken_tokenizer(tokenizer)
    elif kind == "bytes":
        tok, eos = _byte_tokenizer(tokenizer["eos_id"])
    else:
        return False
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token=eos, unk_token=None)
    fast.save_pretrained(str(out_dir))
    return True
