"""Optional dependencies: the pieces of longbert that need more than the base install, and the one check that says
which extra brings them. Nothing here imports them when longbert is imported: each command asks when it runs.

    export   onnx, onnxruntime, onnxscript (torch.onnx's exporter)   `longbert export`, exported folders
    serve    fastapi, uvicorn                                         `longbert serve`
    openvino openvino                                                 `--runtime openvino` (predict, serve)
"""

from __future__ import annotations

import importlib

from longbert.errors import LongbertError

EXTRAS = {
    "export": ("onnx", "onnxruntime", "onnxscript"),
    "serve": ("fastapi", "uvicorn"),
    "openvino": ("openvino",),
}


def require(extra: str, what: str) -> None:
    """Import every module of `extra`, or raise one LongbertError naming what is missing and how to install it
    (`what` says what needs it, e.g. 'longbert export')."""
    missing = []
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise LongbertError(f"{what} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
                            f"installed: pip install 'longbert[{extra}]'")
