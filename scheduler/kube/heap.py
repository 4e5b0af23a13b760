"""The garbage collector while the first lists load: off, then everything loaded frozen out of it.

A cold start decodes the informer caches (with 50,000 pods, some millions of dicts, lists and
strings) and builds the scheduler's state from them. CPython's cyclic collector meanwhile runs a
full collection each time the objects it tracks have grown by a quarter, and each one walks every
object alive: 3.3 s of a 9.7 s start went to 18 of them (5,000 nodes, 50,000 pods, timed with a
``gc.callbacks`` hook; the README's cold-start row has the start before and after). Decoded JSON
holds no reference cycles, so reference counting
frees it whatever the collector does. While the caches load the collector is off; once they are
loaded ``gc.freeze()`` moves everything alive into the permanent generation, which later collections
do not walk: the loaded caches are not walked again and again in the steady state either. A frozen
object is still freed by reference counting when its cache entry is replaced. No collection before
the freeze: it would walk everything once more (0.7 s of the start with 50,000 pods, about 2 s with
150,000) to free the few cycles the start made (event-loop and exception bookkeeping), which the
freeze keeps instead, once.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """No cyclic collection inside; on the way out what is alive is frozen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
