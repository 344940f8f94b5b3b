"""Datasets (toy shapes, image folders), image I/O and transforms."""
