"""joule-bench: grade coding-agent patches with an executable test oracle, meter
the energy of what runs, and sign every result into a tamper-evident ledger."""

from functools import cache


@cache
def _version() -> str:
    # importlib.metadata costs ~15 ms at import; only results and genesis need it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("joule-bench")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'jouled' has no attribute {name!r}")
