"""perfmodel: measure LLM-decode kernels here, project decode throughput there."""

__version__ = "0.1.0"
