"""gRPC transport: a thin servicer over the daemon library."""
