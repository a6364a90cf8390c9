"""Loading Hugging Face models, tokenizers and configs without running their code or downloading unasked.

Every ``from_pretrained`` in the classifiers and ``cuvee rephrase`` goes through :func:`pretrained`, and
``eval-downstream`` checks its model folder with :func:`refuse_remote_code` before lm-eval loads it:

* ``trust_remote_code=False`` always, and a folder whose ``config.json`` / ``tokenizer_config.json`` has
  ``auto_map`` (custom Python shipped with the weights) is refused in one line naming the folder, before
  transformers is asked (left to itself it would prompt "run the custom code? [y/N]" mid-run);
* a local folder is loaded with ``local_files_only=True``: it never causes a hub request;
* only a name the user gave as a hub id (``org/name``, not an existing path, not path-like) may download,
  and not when ``HF_HUB_OFFLINE`` is set; a missing path that merely looks like a hub id (``models/x``
  while ``models/`` is a local folder) is reported as a missing folder.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from cuvee.kernel.errors import UserError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
CODE_FILES = ("config.json", "tokenizer_config.json")


class ModelLoadError(UserError, ValueError):
    """A model cuvee will not load as asked (custom code, missing folder, offline); the message says why."""


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or transformers' older ``TRANSFORMERS_OFFLINE``) is set."""
    return any(os.environ.get(k, "").strip().lower() in {"1", "true", "yes", "on"}
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def looks_like_hub_id(model: str) -> bool:
    """``org/name`` or ``name`` that is not a local path (and whose first part is not a local folder)."""
    if os.path.exists(model) or model.startswith((".", "/", "~")) or not _HUB_ID.match(model):
        return False
    return "/" not in model or not os.path.isdir(model.split("/", 1)[0])


def refuse_remote_code(folder: str | Path) -> None:
    """ModelLoadError when the folder ships custom code (``auto_map``) that loading would have to run."""
    for name in CODE_FILES:
        p = Path(folder) / name
        if not p.is_file():
            continue
        try:
            cfg = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            raise ModelLoadError(f"{folder}: {name} is not readable JSON") from None
        if isinstance(cfg, dict) and cfg.get("auto_map"):
            raise ModelLoadError(f"{folder}: {name} has auto_map (custom Python shipped with the model); cuvee never runs "
                                 f"code from a model folder (trust_remote_code=False): use a built-in transformers "
                                 f"architecture")


def local_files_only(model: str) -> bool:
    """Local folders stay local (after the ``auto_map`` check); hub ids download unless HF_HUB_OFFLINE is set."""
    if os.path.isdir(model):
        refuse_remote_code(model)
        return True
    if looks_like_hub_id(model):
        return hub_offline()
    raise ModelLoadError(f"{model}: no such model folder (and not a Hugging Face hub id)")


def pretrained(auto_cls, model: str, **kwargs):
    """Load ``model`` with ``auto_cls``, never running a model's code; failures become one-line ModelLoadErrors."""
    local_only = local_files_only(str(model))
    try:
        return auto_cls.from_pretrained(str(model), local_files_only=local_only, trust_remote_code=False, **kwargs)
    except (OSError, ValueError) as e:
        msg = " ".join(str(e).split())
        if "trust_remote_code" in msg or "custom code" in msg:
            raise ModelLoadError(f"{model}: needs custom code (auto_map); cuvee never runs code from a model "
                                 f"(trust_remote_code=False)") from None
        if local_only and not os.path.isdir(model):
            raise ModelLoadError(f"{model}: not in the Hugging Face cache and HF_HUB_OFFLINE is set") from None
        raise ModelLoadError(f"cannot load {model}: {msg[:300]}") from None


def load_tokenizer_offline(model: str):
    """The tokenizer of a local folder or cached hub id, or None; never downloads, never runs code."""
    from transformers import AutoTokenizer

    try:
        if os.path.isdir(model):
            refuse_remote_code(model)
        return AutoTokenizer.from_pretrained(model, local_files_only=True, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - any failure means: no tokenizer, so no token counts
        return None
