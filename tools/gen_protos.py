"""Generate the Python bindings of protos/ beside the .proto files (make protos).

Besides the bindings, mypy-protobuf's plugins write the type stubs (*_pb2.pyi for the
messages, *_pb2_grpc.pyi for the stubs and servicers) that mypy strict checks our code
against.

Usage: python tools/gen_protos.py [OUT_DIR]   (OUT_DIR defaults to protos/)
"""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"


def _plugin(name: str) -> str:
    """The path of a protoc plugin installed beside this Python (mypy-protobuf's scripts)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
    return found


def generate(out_dir: Path) -> None:
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTOS}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_dir}",
        f"--mypy_out=quiet:{out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_grpc_out=quiet:{out_dir}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTOS)
