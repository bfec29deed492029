"""gpupool: pool GPUs and share them fairly and safely among users and teams."""

__version__ = "0.1.0"
