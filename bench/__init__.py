"""Benchmarks (`make bench`): numbers come from here, never from timed tests."""
