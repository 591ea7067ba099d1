"""xlac: ahead-of-time compiler for neural-network inference.

    import xlac
    xlac.compile("model.onnx", "build/model.o")   # writes build/model.o and build/model.h
    m = xlac.load("build/model.o")
    y, = m(x)
"""
from .hlo import XlacError
from .driver import CompileResult, compile
from .loader import Model, TensorInfo, load

__all__ = ["compile", "load", "XlacError", "CompileResult", "Model", "TensorInfo"]
