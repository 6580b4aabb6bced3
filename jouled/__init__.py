"""joule-bench: grade coding-agent patches with an executable test oracle, meter
the energy of what runs, and sign every result into a tamper-evident ledger."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("joule-bench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
