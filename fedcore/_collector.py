"""The garbage collector around fedcore's own start-up: imports made without it, their objects kept as the oldest.

Importing fedcore imports torch: about 200,000 objects that live as long as the process. While they are made the
collector walks them again and again (three full collections and dozens of younger ones, ~0.25 s of CPU); with
:func:`paused` around the imports it walks none of them then, and what they made goes straight to the oldest
generation, where the next full collection sees it as it would have. The ``fedcore`` command goes further
(:func:`fedcore.cli.console`): its process ends with the command, so it freezes what it imported for good.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import gc


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside the block; afterwards its objects are in the oldest generation, unscanned, and the
    collector is as it was. Does nothing when the collector is off or the process froze objects itself
    (``gc.freeze``: the unfreeze below would hand them back to the collector)."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # every tracked object to the permanent generation...
        gc.unfreeze()  # ...and back into the oldest one: nothing stays frozen
        gc.enable()
