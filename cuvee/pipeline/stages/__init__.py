"""Built-in cuvee stages (ingest: response checks, extraction, the pre-extraction language cascade).

Every module in this package is imported by the stage registry; modules register themselves with
``register_stage`` at import time and keep heavy imports inside their steps.
"""
