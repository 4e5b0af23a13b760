"""Fuzzing gpuq's input boundaries (design.md Semantics 17): what a cluster holds or a client sends,
through the readers that turn it into the model.

``boundaries`` holds the Hypothesis strategies and the one check per boundary (``http_boundaries``
those of the HTTP parsers: response bytes through gpuq's client, request streams through the
webhook's server); the suite runs each boundary with 10,000 examples
(``tests/unit/boundaries/test_fuzz_boundaries.py``, ``test_fuzz_http.py``), and ``python -m tests.fuzz
--examples 1000000`` is the long run (``__main__``).
"""
