"""Shared test/bench helpers for xlalab.

``xlalab.testing.workloads`` holds the three reference training workloads (MNIST convnet, MLP, TinyGPT)
as plain PyTorch, so tests, examples and the benchmark all train exactly the same models.
"""
