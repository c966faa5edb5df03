"""The gpuaas Python SDK: ``from gpuaas.client import Client``."""

from gpuaas.client.config import ConfigError, Credentials, load_credentials, save_credentials
from gpuaas.client.sdk import ApiError, AsyncClient, Client, JobLogs, Page

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "ConfigError",
    "Credentials",
    "JobLogs",
    "Page",
    "load_credentials",
    "save_credentials",
]
