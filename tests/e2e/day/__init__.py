"""A day in the life of issue 28: ``python -m tests.e2e.day`` (see :mod:`tests.e2e.day.run`)."""
