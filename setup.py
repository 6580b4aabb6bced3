"""Generates the gRPC stubs from proto/ whenever the package is built or installed.

The stubs are build products, never committed: `jouled/v1/*_pb2*.py` are written
next to the package source so that editable and regular installs see the same
modules under the import name `jouled.v1`.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def generate_stubs() -> None:
    import grpc_tools
    from grpc_tools import protoc  # build-time dependency, see [build-system]

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").rglob("*.proto"))
    for proto in protos:
        args = [
            "grpc_tools.protoc",
            f"-I{ROOT / 'proto'}",
            f"-I{include}",
            f"--python_out={ROOT}",
            f"--pyi_out={ROOT}",
            f"--grpc_python_out={ROOT}",
            str(ROOT / proto),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        generate_stubs()
        super().run()


setup(cmdclass={"build_py": BuildPyWithStubs})
