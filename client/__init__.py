"""jb-client: the Python API and CLI for agents, operators and auditors of a jouled daemon."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jb_client.api import Client, ClientError, default_target

__all__ = ["Client", "ClientError", "default_target"]


def __getattr__(name: str) -> Any:
    # The API (and gRPC under it) loads on first use: `import jb_client` for the CLI
    # costs nothing, and only the commands that call a daemon pay for gRPC.
    if name in __all__:
        from jb_client import api

        return getattr(api, name)
    raise AttributeError(f"module 'jb_client' has no attribute {name!r}")
