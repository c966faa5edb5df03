"""gpuaas: an open-source GPU-as-a-Service platform."""

__version__ = "0.1.0"
