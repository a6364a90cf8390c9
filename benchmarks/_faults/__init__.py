"""Fault injection harness shared by ``benchmarks/fault_injection.py`` (``cuvee run``) and
``benchmarks/fault_injection_commands.py`` (``dedup run``, ``classify annotate``, ``mix``, ``train``)."""
