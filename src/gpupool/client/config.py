"""Where a client finds its server and token: `GPUPOOL_URL` / `GPUPOOL_TOKEN`, else the file
`gpupool login` writes (`$XDG_CONFIG_HOME/gpupool/config.toml`, by default
`~/.config/gpupool/config.toml`), else the default URL and no token. One reading for the
CLI, scripts and notebooks."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from gpupool.client.errors import ConfigError

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Config:
    url: str
    token: str | None


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpupool" / "config.toml"


def load_config() -> Config:
    """The URL and token in effect. Raises ConfigError when the file cannot be read."""
    saved: dict[str, str] = {}
    p = config_path()
    if p.exists():
        try:
            saved = {k: str(v) for k, v in tomllib.loads(p.read_text()).items()}
        except (tomllib.TOMLDecodeError, OSError) as e:
            raise ConfigError(
                f"cannot read {p}: {e}; fix or delete it and run gpupool login"
            ) from e
    url = os.environ.get("GPUPOOL_URL") or saved.get("url") or DEFAULT_URL
    token = os.environ.get("GPUPOOL_TOKEN") or saved.get("token") or None
    return Config(url, token)


def save_config(url: str, token: str) -> Path:
    """Write the URL and token (mode 0600); the file's path."""
    p = config_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"url = {json.dumps(url)}\ntoken = {json.dumps(token)}\n")
    p.chmod(0o600)
    return p
