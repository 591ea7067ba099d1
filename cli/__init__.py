"""xlac: ahead-of-time compiler for neural-network inference.

    import xlac
    xlac.compile("model.onnx", "build/model.o")   # writes build/model.o and build/model.h
    m = xlac.load("build/model.o")
    y, = m(x)

With ``target="cuda"`` the object runs on an NVIDIA GPU: ``xlac.load`` returns a
CudaModel, which takes numpy arrays, and device arrays through ``run_device``.
"""
from importlib.metadata import PackageNotFoundError, version as _version

from .hlo import XlacError, XlacWarning
from .driver import CompileResult, compile
from .loader import CudaModel, Model, TensorInfo, load

try:
    __version__ = _version("xlac")
except PackageNotFoundError:     # imported from a source tree that was never installed
    __version__ = "unknown"

__all__ = ["compile", "load", "XlacError", "XlacWarning", "CompileResult", "Model", "CudaModel",
           "TensorInfo", "__version__"]
