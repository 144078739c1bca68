"""A restricted unpickler for data files in pickle formats (the CIFAR python batches).

``pickle.load`` runs whatever a file names: a crafted ``data_batch_1`` whose object has a ``__reduce__``
executes code on load. :func:`load_data_pickle` reads only what a data file holds: builtin containers,
strings, bytes and numbers (the pickle opcodes build those without naming anything), plus the handful
of globals numpy's array and scalar reconstruction names. Any other global refuses the file before
anything is called.
"""
from __future__ import annotations

import codecs
from pathlib import Path
import pickle
from typing import Any, BinaryIO

import numpy as np
from numpy._core import multiarray, numeric

from fedcore.errors import FedcoreError

ALLOWED: dict[tuple[str, str], Any] = {
    # Python 2 and protocol < 3 pickles spell bytes as codecs.encode(text, "latin1")
    ("_codecs", "encode"): codecs.encode,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}
for _module in ("numpy.core.multiarray", "numpy._core.multiarray"):  # numpy 1 wrote numpy.core, numpy 2 numpy._core
    ALLOWED[(_module, "_reconstruct")] = multiarray._reconstruct
    ALLOWED[(_module, "scalar")] = multiarray.scalar
for _module in ("numpy.core.numeric", "numpy._core.numeric"):  # protocol 5 arrays
    ALLOWED[(_module, "_frombuffer")] = numeric._frombuffer  # type: ignore[attr-defined]  # private, not in stubs


class UnsafePickleError(FedcoreError, pickle.UnpicklingError):
    """A data file names a global outside :data:`ALLOWED`; it was refused before anything ran."""


class DataUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` answers only from :data:`ALLOWED`."""

    def __init__(self, file: BinaryIO, *, source: str, encoding: str = "bytes") -> None:
        super().__init__(file, encoding=encoding)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"{self.source}: refused to load: the file asks for {module}.{name}, which a data file never needs "
                f"(allowed: builtin containers, strings, bytes, numbers and numpy arrays); it may be crafted to run "
                f"code, nothing in it was executed") from None


def load_data_pickle(path: str | Path, *, encoding: str = "bytes") -> Any:
    """Unpickle a data file with :class:`DataUnpickler` (``encoding="bytes"`` reads Python 2 strings as bytes)."""
    with open(path, "rb") as fh:
        return DataUnpickler(fh, source=str(path), encoding=encoding).load()


__all__ = ["ALLOWED", "DataUnpickler", "UnsafePickleError", "load_data_pickle"]
