"""rubin: take a PyTorch training job onto a new GPU platform, production grade."""

__version__ = "0.1.0"
