"""Fuzzing gpuq's input boundaries (design.md Semantics 17): what a cluster holds or a client sends,
through the readers that turn it into the model.

``boundaries`` holds the Hypothesis strategies and the one check per boundary; the suite runs each
boundary with 10,000 examples (``tests/unit/test_fuzz_boundaries.py``), and ``python -m tests.fuzz
--examples 1000000`` is the long run (``__main__``).
"""
