"""Regenerate the PodResources Python modules from ``podresources_v1.proto``, the same way every time.

The generated modules are checked in so the agent needs no protoc at run time; a test regenerates them into a
temporary directory and compares byte for byte, so the checked-in code can never drift from the .proto. One fix is
applied after protoc: ``_pb2_grpc.py`` imports its messages as the top-level module ``podresources_v1_pb2``, which
only works if this directory is on ``sys.path`` (that is how protoc's gRPC Python plugin writes the import, as seen
with grpcio-tools 1.85); we rewrite it into a package-relative import.

Run ``python -m watchdog.attribution.proto.generate`` after editing the .proto. Needs grpcio-tools (a test extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
PROTO_NAME = "podresources_v1.proto"
GENERATED = ("podresources_v1_pb2.py", "podresources_v1_pb2.pyi", "podresources_v1_pb2_grpc.py")

_TOP_LEVEL_IMPORT = "import podresources_v1_pb2 as podresources__v1__pb2"
_RELATIVE_IMPORT = "from . import podresources_v1_pb2 as podresources__v1__pb2"


class GenerationError(RuntimeError):
    """protoc failed, or its output no longer has the import line we know how to fix."""


def generate(out_dir: Path | str) -> list[Path]:
    """Run protoc on the .proto into ``out_dir`` and make the gRPC module's import package-relative.

    Returns the paths written. Imports grpc_tools lazily: only developers and the consistency test need it.
    """
    from grpc_tools import protoc  # a build-time tool, deliberately not a runtime dependency

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_DIR / PROTO_NAME),
        ]
    )
    if status != 0:
        raise GenerationError(f"protoc exited with status {status} for {PROTO_DIR / PROTO_NAME}")
    grpc_module = out / "podresources_v1_pb2_grpc.py"
    text = grpc_module.read_text()
    if _TOP_LEVEL_IMPORT not in text:
        raise GenerationError(f"{grpc_module}: expected line {_TOP_LEVEL_IMPORT!r} not found; update generate.py")
    grpc_module.write_text(text.replace(_TOP_LEVEL_IMPORT, _RELATIVE_IMPORT, 1))
    return [out / name for name in GENERATED]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else PROTO_DIR
    for path in generate(target):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
