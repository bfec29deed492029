"""gpupool's Python client: the one way scripts, notebooks, the CLI, the JupyterHub side and
the node agent reach a gpupool server (docs/python.md).

`Client` (blocking) and `AsyncClient` (asyncio) answer with the API's models
(`gpupool.api`), raise `GpupoolError`s whose message says what to do, and never print or
exit. This package imports no server, store or engine code (pyproject.toml's import
contracts); only it speaks HTTP for those tools.
"""

import httpx

from gpupool.client.aio import AsyncClient
from gpupool.client.config import DEFAULT_URL, Config, config_path, load_config, save_config
from gpupool.client.errors import (
    ApiError,
    BadRequest,
    ConfigError,
    Conflict,
    Forbidden,
    GpupoolError,
    IncompatibleServer,
    InvalidInput,
    NotFound,
    ServerError,
    TooManyRequests,
    Unauthorized,
    Unreachable,
    WaitTimeout,
)
from gpupool.client.sync import Client
from gpupool.client.wire import ENDED, parse_mib

#: what `transport=` takes (tests route requests with it; its users need not import httpx)
Transport = httpx.BaseTransport
AsyncTransport = httpx.AsyncBaseTransport

__all__ = [
    "DEFAULT_URL",
    "ENDED",
    "ApiError",
    "AsyncTransport",
    "AsyncClient",
    "BadRequest",
    "Client",
    "Config",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "GpupoolError",
    "IncompatibleServer",
    "InvalidInput",
    "NotFound",
    "ServerError",
    "TooManyRequests",
    "Transport",
    "Unauthorized",
    "Unreachable",
    "WaitTimeout",
    "config_path",
    "load_config",
    "parse_mib",
    "save_config",
]
