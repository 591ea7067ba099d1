"""xlac as an ONNX backend (``onnx.backend.base``): compile with ``xlac.compile``, run the
object through ``xlac.load``.

    import xlac.backend
    rep = xlac.backend.prepare(model)          # compiles into a private temporary folder
    y, = rep.run([x])                          # numpy in, a tuple of numpy out (by name too)
    xlac.backend.run_model(model, [x])         # both at once
    onnx.backend.test.BackendTest(xlac.backend, __name__)   # the official runner

The module itself is the backend, as ``onnxruntime.backend`` is: ``prepare``,
``run_model``, ``run_node``, ``supports_device`` and ``is_compatible`` are the methods of
``XlacBackend``.

Inputs an op needs at compile time (a shape, axes, a count) are graph inputs in many
models. Where the importer asks for one (``ConstantInputNeeded``), ``prepare`` leaves
the compile to ``run``, which pins the named inputs to the values it is given, as a
user would with ``const_inputs``. Shapes alike: where the importer asks for an input's
shape (``InputShapeNeeded``: a dynamic dimension, a sequence's length and element
shapes), ``run`` pins it to the shape of the value given (``input_shapes``), and an
optional input given as None is compiled absent (``absent_inputs``). Sequences are
lists of arrays, in and out; an optional output compiled empty is None. Objects are
cached by model hash and pinned values: a model prepared twice, or run twice on the
same pinned values, compiles once.

Keyword options of ``prepare`` are those of ``xlac.compile`` that do not name files
(``opt_level``, ``input_shapes``, ``const_inputs``, ``absent_inputs``, ``bounds``,
``target``, ``cpu``): with ``bounds={"N": 8}`` a model is compiled once and ``run`` takes
every batch of 1 to 8; ``device="CUDA"`` compiles for ``target="cuda"`` unless a target is given;
``rtol`` and ``atol``, which the onnx runner passes to every backend, are
accepted and not used.
"""
from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from .driver import compile as xlac_compile
from .hlo import XlacError
from .importers.onnx import ConstantInputNeeded, InputShapeNeeded, read_model
from .loader import Model, load

_OPTIONS = ("opt_level", "input_shapes", "const_inputs", "absent_inputs", "bounds", "target",
            "cpu")
_IGNORED = ("rtol", "atol")        # the onnx runner's tolerances, for its own comparison

_lock = threading.Lock()
_objects: dict[str, Model] = {}    # cache key -> the loaded object
_folder: Path | None = None


def _workdir() -> Path:
    """This process's private folder for compiled objects, removed at exit."""
    global _folder
    if _folder is None:
        _folder = Path(tempfile.mkdtemp(prefix="xlac-backend-"))
        atexit.register(shutil.rmtree, _folder, True)
    return _folder


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(f"{p.dtype.str}{p.shape}".encode())
            h.update(np.ascontiguousarray(p).tobytes())
        else:
            h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def _options_key(options: dict) -> tuple:
    """The compile options as a hashable, value-complete key."""
    key = []
    for k in sorted(options):
        v = options[k]
        if k == "const_inputs":
            v = tuple((n, _digest(np.asarray(a))) for n, a in sorted(v.items()))
        elif k == "input_shapes":
            v = tuple((n, repr(d)) for n, d in sorted(v.items()))
        elif k == "absent_inputs":
            v = tuple(sorted(v))
        elif k == "bounds":
            v = tuple(sorted(v.items()))
        key.append((k, v))
    return tuple(key)


def _compiled(model: onnx.ModelProto, model_hash: str, options: dict) -> Model:
    """The loaded object of the model compiled with ``options`` (cached); ``device``
    among them: the CUDA device it runs on."""
    key = _digest(model_hash, _options_key(options))
    with _lock:
        if key in _objects:
            return _objects[key]
    out = _workdir() / f"{key[:32]}.o"
    compile_options = {k: v for k, v in options.items() if k != "device"}
    xlac_compile(model, out, name="model", **compile_options)
    loaded = load(out, device=options.get("device", 0))
    with _lock:
        return _objects.setdefault(key, loaded)


class XlacBackendRep(BackendRep):
    """A prepared model: ``run(inputs)`` with inputs as a list (graph order) or a dict."""

    def __init__(self, model: onnx.ModelProto, options: dict):
        self._hash = hashlib.sha256(model.SerializeToString()).hexdigest()
        self._options = options
        given = set(options.get("const_inputs", {}))
        initialized = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input
                            if i.name not in initialized and i.name not in given]
        self.output_names = [o.name for o in model.graph.output]
        self._sequences = {i.name for i in model.graph.input if _is_sequence(i.type)}
        # Learned from the importer, then pinned by run to the values given: inputs
        # compiled as constants, inputs whose shapes are compiled in.
        self.pinned_inputs: tuple[str, ...] = ()
        self.shaped_inputs: tuple[str, ...] = ()
        self._model: Model | None = None
        self._proto = onnx.ModelProto()       # for run's compiles
        self._proto.CopyFrom(model)
        try:
            self._model = _compiled(model, self._hash, options)
        except ConstantInputNeeded as e:
            self.pinned_inputs = tuple(e.inputs)   # compiled by run, on the values given
        except InputShapeNeeded as e:
            self.shaped_inputs = tuple(e.inputs)

    def run(self, inputs, **kwargs) -> tuple:
        if kwargs:
            raise XlacError(f"unknown run option(s): {', '.join(sorted(kwargs))}")
        values = self._named(inputs)
        absent = tuple(n for n in self.input_names if values[n] is None)
        if self._model is not None and not absent:
            model, pinned = self._model, set()
        else:
            model = self._pinning(values, absent)
            pinned = set(self.pinned_inputs)
        outputs = model(*(values[n] for n in self.input_names
                          if n not in pinned and n not in absent))
        return namedtupledict("Outputs", self.output_names)(*outputs)

    def _named(self, inputs) -> dict[str, object]:
        if isinstance(inputs, dict):
            unknown = sorted(set(inputs) - set(self.input_names))
            missing = [n for n in self.input_names if n not in inputs]
            if unknown or missing:
                raise XlacError(f"the model's inputs are {', '.join(self.input_names)}; "
                                f"unknown: {', '.join(unknown) or 'none'}, "
                                f"missing: {', '.join(missing) or 'none'}")
            items = [(n, inputs[n]) for n in self.input_names]
        else:
            inputs = list(inputs)
            if len(inputs) != len(self.input_names):
                raise XlacError(f"the model takes {len(self.input_names)} input(s) "
                                f"({', '.join(self.input_names)}), got {len(inputs)}")
            items = list(zip(self.input_names, inputs))
        return {n: _value(v, n, n in self._sequences) for n, v in items}

    def _pinning(self, values: dict[str, object], absent: tuple[str, ...]) -> Model:
        """Compile with the inputs the importer asks for pinned to ``values`` (their values
        or their shapes) and the optional inputs given None absent; every input it asks
        for is remembered, so that the next run pins them all at once."""
        while True:
            given = self._options
            pins = {"const_inputs": {**given.get("const_inputs", {}),
                                     **{n: values[n] for n in self.pinned_inputs}},
                    "input_shapes": {**given.get("input_shapes", {}),
                                     **{n: _shape(values[n]) for n in self.shaped_inputs
                                        if n not in absent}},
                    "absent_inputs": sorted({*given.get("absent_inputs", ()), *absent})}
            options = {**given, **{k: v for k, v in pins.items() if v}}
            try:
                return _compiled(self._proto, self._hash, options)
            except (ConstantInputNeeded, InputShapeNeeded) as e:
                learned = ("pinned_inputs" if isinstance(e, ConstantInputNeeded)
                           else "shaped_inputs")
                new = [n for n in e.inputs if n not in getattr(self, learned)]
                if not new or any(values[n] is None for n in new):
                    raise
                setattr(self, learned, getattr(self, learned) + tuple(new))


def _is_sequence(t: onnx.TypeProto) -> bool:
    """A sequence, or an optional of one."""
    if t.HasField("optional_type"):
        t = t.optional_type.elem_type
    return t.HasField("sequence_type")


def _value(value, name: str, sequence: bool):
    """An input as xlac.load's model takes it: an array, a list of arrays (``sequence``)
    or None (an empty optional)."""
    if value is None:
        return None
    if sequence and isinstance(value, (list, tuple)):
        return [_array(v, f"{name}[{k}]") for k, v in enumerate(value)]
    return _array(value, name)


def _shape(value):
    """What ``input_shapes`` pins for a value: its shape, or its elements' shapes."""
    return [a.shape for a in value] if isinstance(value, list) else value.shape


def _array(value, name: str) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if value is None or isinstance(value, (list, tuple, dict)):
        raise XlacError(f"input '{name}' is a {type(value).__name__}, where a tensor is "
                        "expected")
    return value if isinstance(value, np.ndarray) else np.asarray(value)


class XlacBackend(Backend):
    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> XlacBackendRep:
        """Compile ``model`` (a ModelProto, bytes or a path) for ``device`` ('CPU', or
        'CUDA' / 'CUDA:N': target cuda, run on GPU N)."""
        if not cls.supports_device(device):
            raise XlacError(f"xlac compiles for the CPU and CUDA, not for device '{device}'")
        unknown = sorted(set(kwargs) - set(_OPTIONS) - set(_IGNORED))
        if unknown:
            raise XlacError(f"unknown backend option(s): {', '.join(unknown)} "
                            f"(options: {', '.join(_OPTIONS)})")
        options = {k: v for k, v in kwargs.items() if k in _OPTIONS}
        where = Device(device)
        if where.type == DeviceType.CUDA:
            options.setdefault("target", "cuda")
            options["device"] = int(where.device_id or 0)
        if not isinstance(model, onnx.ModelProto):
            model, _ = read_model(model)
        return XlacBackendRep(model, options)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs, device: str = "CPU",
                 outputs_info=None, **kwargs) -> tuple:
        """Run one node on ``inputs`` (arrays for its present inputs, in order), in a model
        of the opset ``opset_version`` (default: the newest); ``outputs_info`` gives each
        output's (dtype, shape) where ONNX's shape inference cannot."""
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        arrays = [_array(x, n) for x, n in zip(inputs, [n for n in node.input if n])]
        graph_inputs = [onnx.helper.make_tensor_value_info(
            n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip([n for n in node.input if n], arrays)]
        outputs = [n for n in node.output if n]
        if outputs_info is not None:
            graph_outputs = [onnx.helper.make_tensor_value_info(
                n, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                for n, (dt, shape) in zip(outputs, outputs_info)]
        else:
            graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in outputs]
        graph = onnx.helper.make_graph([node], "node", graph_inputs, graph_outputs)
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_operatorsetid(node.domain, opset)])
        if outputs_info is None:
            model = onnx.shape_inference.infer_shapes(model)
            del model.graph.output[:]
            known = {v.name: v for v in model.graph.value_info}
            model.graph.output.extend(known.get(n, onnx.helper.make_empty_tensor_value_info(n))
                                      for n in outputs)
        return cls.run_model(model, arrays, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type in (DeviceType.CPU, DeviceType.CUDA)
        except AttributeError:          # not a device name onnx knows
            return False


is_compatible = XlacBackend.is_compatible
prepare = XlacBackend.prepare
run_model = XlacBackend.run_model
run_node = XlacBackend.run_node
supports_device = XlacBackend.supports_device
