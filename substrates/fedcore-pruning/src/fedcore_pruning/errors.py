"""The one error this substrate adds: a submodel state or update that does not fit the global model."""
from __future__ import annotations

from fedcore.errors import FedcoreError


class SubmodelMismatchError(FedcoreError, ValueError):
    """A sliced state or masked update names tensors, shapes or masks the spec or the global state does not have."""
