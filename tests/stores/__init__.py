"""Tests of the anchor stores (issue #4)."""
