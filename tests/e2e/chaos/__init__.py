"""The chaos soak of issue 11: ``python -m tests.e2e.chaos`` (see :mod:`tests.e2e.chaos.soak`)."""
