"""Generated gRPC stubs for the jouled.v1 API (built from proto/jouled/v1 at install time)."""
