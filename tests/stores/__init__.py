"""Tests of the anchor stores: one contract suite over every backend, then each backend's own."""
