"""mixsearch: choose a mix by experiment. Small proxies trained on N mixtures of the sources (read from
per-source token caches, never copied), a mixing law and a regression fitted per target, the weights that
minimise the predicted target loss, and a paired-seed proof against the natural and uniform mixes.

Entry points: ``cuvee.mixsearch.search.run_search`` / ``dry_run`` and the ``cuvee mix search`` command."""
