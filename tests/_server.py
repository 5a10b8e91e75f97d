"""
The local Responses server in a subprocess, for tests (its CPU and memory are not theirs).

Shared with the benchmarks: ``benchmarks/_support.py``.
"""

from benchmarks._support import server_process


__all__ = ["server_process"]
