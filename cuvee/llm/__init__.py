"""LLM jobs over documents (``classify annotate``, ``rephrase``): the model behind a declared protocol
(``backend``: an OpenAI-compatible endpoint in ``endpoint`` and ``route``, a local Hugging Face LM in ``local``)
and the one driver with its tally (``driver``). Resume records live in ``cuvee.kernel.ledger``.

It sits at the level of ``cuvee.pipeline``: it imports ``cuvee.kernel``, ``cuvee.pipeline`` and
``cuvee.hf_loading``, never a command package (classifiers, rephrase, mixer, train), so those stay thin."""
