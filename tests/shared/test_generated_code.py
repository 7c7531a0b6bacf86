"""The committed Python bindings are exactly what `make protos` generates from protos/."""

from __future__ import annotations

import filecmp
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"


def _generated_files(base: Path) -> set[Path]:
    return {
        p.relative_to(base)
        for pattern in ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py", "*_pb2_grpc.pyi")
        for p in base.rglob(pattern)
    }


def test_bindings_match_the_protos(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "tools" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(tmp_path)

    fresh = _generated_files(tmp_path)
    committed = _generated_files(PROTOS)
    assert fresh == committed, "run `make protos`: generated files differ from protos/"
    stale = [
        str(p) for p in sorted(fresh) if not filecmp.cmp(tmp_path / p, PROTOS / p, shallow=False)
    ]
    assert not stale, f"run `make protos`: stale bindings {stale}"
