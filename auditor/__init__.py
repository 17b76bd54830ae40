"""audit: weight-inventory, per-rank memory and performance auditor for DeepSeek-style sparse-attention models."""

__version__ = "0.1.0"
