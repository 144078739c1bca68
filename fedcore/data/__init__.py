"""Datasets that run offline: the embedded digits set, seeded synthetic data, and loaders for real files."""
from fedcore.data.arrays import ArrayDataset, batches, column_of, gather, labels_of
from fedcore.data.digits import load_digits
from fedcore.data.images import ImageDataset
from fedcore.data.synthetic import synthetic_classification

__all__ = ["ArrayDataset", "ImageDataset", "batches", "column_of", "gather", "labels_of", "load_digits",
           "synthetic_classification"]
