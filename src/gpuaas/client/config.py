"""Where the CLI keeps the server URL and token: ``~/.config/gpuaas/config.json`` (mode 0600).

``$GPUAAS_CONFIG`` moves the file; ``$GPUAAS_URL`` and ``$GPUAAS_TOKEN`` override what it holds,
so that scripts and CI never need a file on disk.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    """The client has no server to talk to, or its config file is unreadable."""


@dataclass(frozen=True, slots=True)
class Credentials:
    url: str
    token: str


def config_path() -> Path:
    override = os.environ.get("GPUAAS_CONFIG")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    return Path(base).expanduser() / "gpuaas" / "config.json"


def _read_file(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return {k: v for k, v in data.items() if isinstance(v, str)}


def load_credentials() -> Credentials:
    """The environment first, then the config file; a clear error when neither has both."""
    path = config_path()
    stored = _read_file(path)
    url = os.environ.get("GPUAAS_URL") or stored.get("url")
    token = os.environ.get("GPUAAS_TOKEN") or stored.get("token")
    if not url or not token:
        missing = "url" if not url else "token"
        raise ConfigError(
            f"no server {missing} configured: run `gpuaas login URL TOKEN` "
            f"(or set GPUAAS_URL and GPUAAS_TOKEN); looked in {path}"
        )
    return Credentials(url=url, token=token)


def save_credentials(url: str, token: str) -> Path:
    """Write the file readable by its owner only (it holds a bearer token)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps({"url": url, "token": token}, indent=2) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(payload)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through os.open
    return path
