"""jb-client: the Python API and CLI for agents, operators and auditors of a jouled daemon."""

from jb_client.api import Client, ClientError, default_target

__all__ = ["Client", "ClientError", "default_target"]
