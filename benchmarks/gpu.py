"""The GPU check of the CUDA target (part 6 of the CUDA issue), in one bounded run.

On the GPU machine, from the repository root of the working tree (with gpu-wheels/,
made here beforehand by ``sh benchmarks/gpu_wheels.sh``, carried along: it is ignored
by git, so name it in the run's carry list):

    python3 benchmarks/gpu.py --out "$OUT"

That one command installs cffi and pycparser from gpu-wheels/ (``python3 -m pip install
--no-index gpu-wheels/*.whl``) where cffi is missing, installs this checkout
(``python3 -m pip install --no-deps --no-build-isolation -e .``) where ``xlac`` does not
import from it, starts itself again, and then runs the steps below within ``--budget``
seconds (450 by default: each step has a deadline, the items a step has no time left
for are skipped with a note, and every subprocess has a timeout). Each line goes to
OUT/results.txt as soon as it is known (flushed) and to stdout; OUT/results.json is
rewritten after every step, so a run cut short still leaves what it did.

1. Environment: GPU, compute capability, driver, torch, CUDA, tools; TF32 off.
2. Models (benchmarks/gpu_models.py, seeded random weights): ResNet-18, MobileNetV2,
   a BERT-style encoder, ResNet-8 and DS-CNN, exported to ONNX (opset 17, static shapes)
   at batch 1 and 32, compiled by xlac for ``cuda`` at the device's ``sm_XY`` and for
   this machine's CPU, all compiles in parallel subprocesses, and loaded.
3. Correctness: xlac's output (``run_device`` on torch CUDA tensors) against PyTorch on
   the GPU (fp32, TF32 off) and against xlac's own CPU build of the same ONNX, on the
   same input: max abs error, max relative error (max |diff| / max |reference|) and
   pass = ``numpy.allclose(xlac, reference, rtol=1e-3, atol=1e-4)``.
4. compute-sanitizer memcheck and racecheck on one call of DS-CNN at batch 1 (a child
   process: ``gpu.py --sanitizer-child OBJ``), the ERROR SUMMARY line of each.
5. Latency, batch 1 and 32, median of up to 200 synchronized runs after warm-up, timed
   with CUDA events: xlac ``run_device`` on the current stream, xlac ``run_device``
   captured in a CUDA graph and replayed, PyTorch eager, PyTorch CUDA-graph replay and
   ``torch.compile(mode="reduce-overhead")``. torch.compile runs in a child process
   (``gpu.py --torch-compile-child``) started before step 2, so its compiles overlap
   steps 2 to 4; it times its models only once this process has timed its own (a file
   says when), so the two never share the GPU while timing. A Markdown table ends it.
6. results.json: everything above.

Here, without a GPU: ``python benchmarks/gpu.py --emulate`` runs steps 2, 3 and 5 for
ResNet-8, DS-CNN and the BERT encoder at batch 1 with target ``cuda-emulated`` (the
kernels compiled for this machine, run by the stand-in driver of tests/cuda, which is
built here where XLAC_CUDA_DRIVER is unset), host arrays posing as device arrays,
PyTorch on the CPU, time.perf_counter instead of CUDA events, a few runs, and no
CUDA graphs, torch.compile or sanitizer.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

STARTED = time.time()
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

RTOL, ATOL = 1e-3, 1e-4
ORDER = ("dscnn", "resnet8", "bert", "mobilenetv2", "resnet18")    # cheapest first
SMALL = ("resnet8", "dscnn", "bert")
# /work/shared/GPU.md: PyTorch on the H100, batch 1, median of 200 synchronized runs (ms):
# eager, CUDA-graph replay, torch.compile reduce-overhead.
H100_REFERENCE = {
    "resnet18": (2.56, 0.49, 0.43), "mobilenetv2": (4.70, 0.46, 0.46),
    "bert": (1.23, 0.21, 0.25), "resnet8": (0.83, 0.11, 0.20), "dscnn": (1.09, 0.088, 0.14),
}
# Share of the budget, from the start, by which each step ends.
DEADLINES = {"models": 0.42, "correctness": 0.52, "sanitizer": 0.64, "latency": 0.97}
# One timed variant takes about this many seconds at most: fewer runs where a run is slow.
MEASURE_SECONDS = 4.0
INSTALLED_FLAG = "XLAC_GPU_CHECK_STARTED"   # the start time, across the re-exec after installing


# -- results --------------------------------------------------------------------------------

class Results:
    """Lines to OUT/results.txt (flushed each) and stdout; the JSON to OUT/results.json."""

    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        # Appended to after the re-exec that follows installing (the first lines are the
        # installs'), else begun afresh.
        self.text = open(out / "results.txt", "a" if os.environ.get(INSTALLED_FLAG) else "w",
                         buffering=1)
        self.data: dict = {"steps": {}, "notes": []}

    def line(self, text: str = "") -> None:
        self.text.write(text + "\n")
        self.text.flush()
        print(text, flush=True)

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        self.line(f"  note: {text}")

    def save(self) -> None:
        tmp = self.out / ".results.json.tmp"
        tmp.write_text(json.dumps(self.data, indent=1, default=_json_default))
        os.replace(tmp, self.out / "results.json")


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    return repr(x)


def _last_line(text: str) -> str:
    lines = [s.strip() for s in (text or "").splitlines() if s.strip()]
    return lines[-1][:300] if lines else ""


def _first_line(text: str) -> str:
    lines = [s.strip() for s in (text or "").splitlines() if s.strip()]
    return lines[0][:300] if lines else ""


def _run(cmd, timeout: float, **kw) -> tuple[int | None, str]:
    """(return code or None on a timeout or a missing program, stdout + stderr)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout), **kw)
        return done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        parts = [p.decode(errors="replace") if isinstance(p, bytes) else p
                 for p in (e.stdout, e.stderr) if p]
        return None, "".join(parts) + f"\n(timed out after {timeout:.0f} s)"
    except OSError as e:
        return None, f"cannot run {cmd[0]}: {e}"


# -- step 0: installation on the GPU machine -----------------------------------------------

def ensure_installed(log) -> None:
    """cffi from gpu-wheels/ and this checkout as ``xlac``; starts the script again after
    installing anything (a fresh interpreter reads the new .pth files)."""
    installed = False
    if importlib.util.find_spec("cffi") is None:
        wheels = sorted(str(p) for p in (ROOT / "gpu-wheels").glob("*.whl"))
        if not wheels:
            raise SystemExit("cffi is missing and gpu-wheels/ holds no wheels: run "
                             "'sh benchmarks/gpu_wheels.sh' on a machine with a network and "
                             "bring gpu-wheels/ along")
        rc, out = _run([sys.executable, "-m", "pip", "install", "--no-index", *wheels], 180)
        log(f"setup: pip install --no-index gpu-wheels/*.whl: rc {rc}: {_last_line(out)}")
        installed = True
    spec = importlib.util.find_spec("xlac")
    here = spec is not None and spec.origin and Path(spec.origin).resolve().is_relative_to(ROOT)
    if not here:
        if not _setuptools_builds_wheels():
            fallback = ROOT / "gpu-wheels" / "fallback"
            extra = sorted(str(p) for p in fallback.glob("setuptools*.whl"))
            if extra:
                rc, out = _run([sys.executable, "-m", "pip", "install", "--no-index", *extra], 180)
                log(f"setup: pip install --no-index setuptools: rc {rc}: {_last_line(out)}")
        rc, out = _run([sys.executable, "-m", "pip", "install", "--no-deps",
                        "--no-build-isolation", "-e", str(ROOT)], 300)
        log(f"setup: pip install --no-deps --no-build-isolation -e .: rc {rc}: {_last_line(out)}")
        if rc != 0:
            log(out[-3000:])
            raise SystemExit("installing xlac failed")
        installed = True
    if installed:
        if os.environ.get(INSTALLED_FLAG):
            raise SystemExit("installed, yet xlac or cffi still does not import")
        os.environ[INSTALLED_FLAG] = repr(STARTED)
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, *sys.argv])


def _setuptools_builds_wheels() -> bool:
    """Whether setuptools is there and new enough to build the editable wheel without the
    ``wheel`` package (70.1 took bdist_wheel in)."""
    from importlib import metadata
    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        return False
    if importlib.util.find_spec("wheel") is not None:
        return True
    numbers = [int(n) for n in re.findall(r"\d+", version)[:2]] + [0, 0]
    return tuple(numbers[:2]) >= (70, 1)


# -- device arrays ----------------------------------------------------------------------------

class HostDeviceArray:
    """A numpy array posing as a device array (``__cuda_array_interface__``): emulated
    device memory is host memory."""

    def __init__(self, array: np.ndarray):
        self.array = array

    @property
    def __cuda_array_interface__(self) -> dict:
        a = self.array
        return {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, False),
                "strides": None, "version": 3}


def aligned_host_buffer(nbytes: int, align: int = 256) -> np.ndarray:
    raw = np.zeros(nbytes + align, np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip:skip + max(nbytes, 1)]


# -- the run's configuration --------------------------------------------------------------------

@dataclass
class Config:
    emulate: bool
    models: list[str]
    batches: list[int]
    runs: int
    warmup: int
    budget: float
    work: Path
    start: float = field(default_factory=lambda: float(os.environ.get(INSTALLED_FLAG) or STARTED))

    def deadline(self, step: str) -> float:
        return self.start + DEADLINES[step] * self.budget

    def left(self, step: str) -> float:
        return self.deadline(step) - time.time()


@dataclass
class Entry:
    """One model at one batch through the steps."""
    name: str
    batch: int
    onnx: Path | None = None
    cuda_obj: Path | None = None
    cpu_obj: Path | None = None
    model: object = None         # xlac's CUDA model
    cpu_model: object = None     # xlac's CPU model
    info: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.name}/b{self.batch}"


# -- step 1 -------------------------------------------------------------------------------------

def step_environment(cfg: Config, res: Results, torch) -> dict:
    env: dict = {"python": platform.python_version(), "numpy": np.__version__,
                 "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                 "emulate": cfg.emulate, "cpu_count": os.cpu_count()}
    import llvmlite
    import onnx
    env["llvmlite"], env["onnx"] = llvmlite.__version__, onnx.__version__
    try:
        import xlac
        env["xlac"] = getattr(xlac, "__version__", "?")
    except Exception as e:    # noqa: BLE001
        env["xlac"] = f"import failed: {e}"
    rc, out = _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], 10)
    env["git"] = out.strip() if rc == 0 else None
    rc, out = _run([os.environ.get("CC", "cc"), "--version"], 10)
    env["cc"] = _first_line(out)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    env["tf32"] = {"matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                   "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}
    if cfg.emulate:
        env["device"] = "none: --emulate (target cuda-emulated, stand-in driver "
        env["device"] += f"{os.environ.get('XLAC_CUDA_DRIVER')})"
        env["arch"] = "sm_80"       # the compute capability the stand-in driver reports
    else:
        if not torch.cuda.is_available():
            raise SystemExit("torch sees no CUDA device (use --emulate on a machine without one)")
        major, minor = torch.cuda.get_device_capability(0)
        props = torch.cuda.get_device_properties(0)
        env["device"] = torch.cuda.get_device_name(0)
        env["capability"] = f"{major}.{minor}"
        env["arch"] = f"sm_{major}{minor}"
        env["memory_gib"] = round(props.total_memory / 2**30, 1)
        env["multiprocessors"] = props.multi_processor_count
        env["cudnn"] = torch.backends.cudnn.version()
        env["driver_cuda_version"] = _driver_version()
        rc, out = _run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                        "--format=csv,noheader"], 20)
        env["nvidia_smi"] = _first_line(out) if rc == 0 else f"unavailable: {_last_line(out)}"
        for tool in ("ptxas", "compute-sanitizer"):
            rc, out = _run([tool, "--version"], 20)
            env[tool] = _last_line(out) if rc == 0 else None
        try:
            import cupy
            env["cupy"] = cupy.__version__
        except Exception:    # noqa: BLE001
            env["cupy"] = None
    for k, v in env.items():
        res.line(f"  {k}: {v}")
    return env


def _driver_version() -> str | None:
    """cuDriverGetVersion of libcuda.so.1, as major.minor."""
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"{v.value // 1000}.{v.value % 1000 // 10}"
    except OSError:
        pass
    return None


# -- step 2 -------------------------------------------------------------------------------------

def step_models(cfg: Config, res: Results, torch, arch: str, built: dict) -> list[Entry]:
    import gpu_models
    import xlac
    target = "cuda-emulated" if cfg.emulate else "cuda"
    entries: list[Entry] = []
    jobs: list[tuple[Entry, str, list[str]]] = []
    for name in cfg.models:
        model = built[name]
        for batch in cfg.batches:
            e = Entry(name, batch)
            entries.append(e)
            if cfg.left("models") <= 0:
                e.info["error"] = "skipped: step 2's time spent"
                continue
            e.onnx = cfg.work / f"{name}_b{batch}.onnx"
            t = time.time()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    gpu_models.export_onnx(model, gpu_models.sample_input(name, batch), e.onnx)
            except Exception as ex:    # noqa: BLE001
                e.info["error"] = f"export failed: {type(ex).__name__}: {ex}"
                res.line(f"  {e.key}: {e.info['error']}")
                e.onnx = None
                continue
            e.info["export_s"] = round(time.time() - t, 2)
            e.cuda_obj = cfg.work / f"{name}_b{batch}_{target.replace('-', '_')}.o"
            e.cpu_obj = cfg.work / f"{name}_b{batch}_cpu.o"
            xlac_cli = [sys.executable, "-m", "xlac", str(e.onnx)]
            jobs.append((e, "cuda", [*xlac_cli, "-o", str(e.cuda_obj), "--target", target,
                                     "--cpu", arch]))
            jobs.append((e, "cpu", [*xlac_cli, "-o", str(e.cpu_obj)]))
            _drain(jobs, cfg, res, start_only=True)
    _drain(jobs, cfg, res, start_only=False)
    for e in entries:
        if e.info.get("error"):
            continue
        for kind in ("cuda", "cpu"):
            if cfg.left("models") <= 0:
                e.info.setdefault("error", "skipped: step 2's time spent before loading")
                break
            if e.info.get(f"compile_{kind}_error"):
                continue
            t = time.time()
            try:
                m = xlac.load(e.cuda_obj if kind == "cuda" else e.cpu_obj)
            except Exception as ex:    # noqa: BLE001
                e.info[f"load_{kind}_error"] = f"{type(ex).__name__}: {ex}"
                continue
            e.info[f"load_{kind}_s"] = round(time.time() - t, 2)
            if kind == "cuda":
                e.model = m
                e.info["device_arena_bytes"] = m.device_arena_size
            else:
                e.cpu_model = m
        i = e.info
        res.line(f"  {e.key}: export {i.get('export_s')} s; compile {target} "
                 f"{_took(i, 'compile_cuda')}, cpu {_took(i, 'compile_cpu')}; load {target} "
                 f"{_took(i, 'load_cuda')}, cpu {_took(i, 'load_cpu')}; device arena "
                 f"{i.get('device_arena_bytes', '-')} B")
    return entries


def _took(info: dict, what: str) -> str:
    if f"{what}_s" in info:
        return f"{info[what + '_s']} s"
    return f"FAILED ({info[what + '_error']})" if f"{what}_error" in info else "-"


_RUNNING: list = []


def _drain(jobs, cfg: Config, res: Results, start_only: bool) -> None:
    """Runs the compile ``jobs`` as subprocesses, as many at once as there are cores, and
    collects those that ended; with ``start_only`` returns at once, else waits for them
    all, killing those still running at step 2's deadline."""
    width = max(1, (os.cpu_count() or 2))
    while True:
        while jobs and len(_RUNNING) < width:
            e, kind, cmd = jobs.pop(0)
            log = open(cfg.work / f"{e.name}_b{e.batch}_{kind}.log", "w")
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            _RUNNING.append((e, kind, proc, time.time(), log))
        late = cfg.left("models") <= 0
        for item in list(_RUNNING):
            e, kind, proc, t, log = item
            rc = proc.poll()
            if rc is None and not late:
                continue
            if rc is None:
                proc.kill()
                proc.wait()
            log.close()
            _RUNNING.remove(item)
            if rc == 0:
                e.info[f"compile_{kind}_s"] = round(time.time() - t, 2)
            else:
                text = Path(log.name).read_text(errors="replace")
                e.info[f"compile_{kind}_error"] = "killed: step 2's time spent" if rc is None \
                    else f"rc {rc}: {_last_line(text)}"
        if start_only or not (jobs or _RUNNING):
            return
        time.sleep(0.05)


# -- step 3 -------------------------------------------------------------------------------------

class Device:
    """Arrays and the run of an xlac model on the GPU (torch CUDA tensors) or, emulated, on
    host arrays posing as device arrays."""

    def __init__(self, torch, emulate: bool):
        self.torch, self.emulate = torch, emulate

    def tensor(self, x):
        """A torch tensor of ``x`` on the device (the CPU where emulated)."""
        if not isinstance(x, self.torch.Tensor):
            x = self.torch.from_numpy(np.ascontiguousarray(x))
        return x.contiguous() if self.emulate else x.cuda().contiguous()

    def empty(self, shape, dtype):
        t = self.torch.from_numpy(np.empty(0, dtype)).dtype
        return self.torch.empty(tuple(shape), dtype=t, device="cpu" if self.emulate else "cuda")

    def arena(self, nbytes: int):
        if self.emulate:
            return HostDeviceArray(aligned_host_buffer(nbytes))
        # torch's caching allocator aligns to 512 bytes; the slice makes sure of 256.
        raw = self.torch.empty(max(nbytes, 1) + 256, dtype=self.torch.uint8, device="cuda")
        skip = (-raw.data_ptr()) % 256
        return raw[skip:skip + max(nbytes, 1)]

    def view(self, t):
        """What run_device takes for the tensor ``t``."""
        return HostDeviceArray(t.numpy()) if self.emulate else t

    def stream(self) -> int:
        return 0 if self.emulate else self.torch.cuda.current_stream().cuda_stream

    def sync(self) -> None:
        if not self.emulate:
            self.torch.cuda.synchronize()


class Bound:
    """The device arrays of one xlac model: ``run()`` queues one inference."""

    def __init__(self, dev: Device, m, x):
        self.dev, self.m = dev, m
        self.x = dev.tensor(x)
        self.ys = [dev.empty(t.shape, t.dtype) for t in m.outputs]
        self.arena = dev.arena(m.device_arena_size)
        self.ins, self.outs = [dev.view(self.x)], [dev.view(y) for y in self.ys]

    def run(self, stream: int | None = None) -> None:
        self.m.run_device(self.ins, self.outs, self.arena,
                          self.dev.stream() if stream is None else stream)

    def output(self) -> np.ndarray:
        self.dev.sync()
        return self.ys[0].cpu().numpy().copy()


def compare(got: np.ndarray, want: np.ndarray) -> dict:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return {"pass": False, "error": f"shape {got.shape} against {want.shape}"}
    diff = np.abs(got - want)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return {"max_abs": float(diff.max()) if diff.size else 0.0,
            "max_rel": float(diff.max() / scale) if diff.size and scale else 0.0,
            "ref_max_abs": scale, "finite": bool(np.isfinite(got).all()),
            "pass": bool(np.isfinite(got).all() and np.allclose(got, want, rtol=RTOL, atol=ATOL))}


def step_correctness(cfg: Config, res: Results, torch, dev: Device, entries, built) -> list:
    import gpu_models
    rows = []
    res.line(f"  pass = numpy.allclose(xlac, reference, rtol={RTOL}, atol={ATOL}); "
             "max rel = max|diff| / max|reference|")
    for e in entries:
        if e.model is None:
            why = e.info.get("error") or "no CUDA model (step 2)"
            rows.append({"model": e.name, "batch": e.batch, "skipped": why})
            res.line(f"  {e.key}: skipped, {why}")
            continue
        if cfg.left("correctness") <= 0:
            rows.append({"model": e.name, "batch": e.batch, "skipped": "step 3's time spent"})
            res.line(f"  {e.key}: skipped, step 3's time spent")
            continue
        try:
            x = gpu_models.sample_input(e.name, e.batch)
            model = built[e.name] if cfg.emulate else built[e.name].cuda()
            with torch.inference_mode():
                ref = model(dev.tensor(x))
                dev.sync()
                ref = ref.float().cpu().numpy()
            b = Bound(dev, e.model, x.numpy())
            for y in b.ys:         # an output the model never writes shows as NaN
                if y.is_floating_point():
                    y.fill_(float("nan"))
            b.run()
            got = b.output()
            row = {"model": e.name, "batch": e.batch,
                   "vs_torch": compare(got, ref)}
            # The copying entry (NAME_run_cuda) gives the same as run_device.
            copied, = e.model(x.numpy())
            row["run_cuda_vs_run_device_max_abs"] = float(np.max(np.abs(copied - got)))
            if e.cpu_model is not None:
                cpu, = e.cpu_model(x.numpy())
                row["vs_xlac_cpu"] = compare(got, cpu)
                row["xlac_cpu_vs_torch"] = compare(cpu, ref)
            rows.append(row)
            t, c = row["vs_torch"], row.get("vs_xlac_cpu", {})
            res.line(f"  {e.key}: vs torch {'PASS' if t['pass'] else 'FAIL'} max abs "
                     f"{t.get('max_abs', 0):.3g} max rel {t.get('max_rel', 0):.3g} (|ref| <= "
                     f"{t.get('ref_max_abs', 0):.3g}); vs xlac cpu "
                     f"{'PASS' if c.get('pass') else 'FAIL' if c else 'n/a'} max abs "
                     f"{c.get('max_abs', float('nan')):.3g}; run_cuda vs run_device "
                     f"{row['run_cuda_vs_run_device_max_abs']:.3g}")
        except Exception as ex:    # noqa: BLE001
            rows.append({"model": e.name, "batch": e.batch,
                         "error": f"{type(ex).__name__}: {ex}"})
            res.line(f"  {e.key}: ERROR {type(ex).__name__}: {ex}")
    return rows


# -- step 4 -------------------------------------------------------------------------------------

def step_sanitizer(cfg: Config, res: Results, entries) -> dict:
    found = {}
    e = next((e for e in entries if e.name == "dscnn" and e.batch == 1 and e.model), None)
    if e is None:
        res.note("sanitizer skipped: no DS-CNN batch-1 CUDA model")
        return {"skipped": "no DS-CNN batch-1 CUDA model"}
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        res.note("sanitizer skipped: compute-sanitizer is not on PATH")
        return {"skipped": "compute-sanitizer not on PATH"}
    for check in ("memcheck", "racecheck"):
        left = cfg.left("sanitizer")
        if left < 10:
            found[check] = {"skipped": "step 4's time spent"}
            res.line(f"  {check}: skipped, step 4's time spent")
            continue
        t = time.time()
        rc, out = _run([tool, "--tool", check, sys.executable, str(Path(__file__).resolve()),
                        "--sanitizer-child", str(e.cuda_obj)], min(150.0, left))
        summary = [s.strip() for s in out.splitlines() if "ERROR SUMMARY" in s or
                   "RACECHECK SUMMARY" in s]
        child = [s.strip() for s in out.splitlines() if s.startswith("child:")]
        # memcheck: "ERROR SUMMARY: 0 errors"; racecheck adds "RACECHECK SUMMARY: 0
        # hazards displayed (0 errors, 0 warnings)".
        clean = rc == 0 and bool(summary) and bool(child) and all(
            re.search(r"(?<!\d)0 errors", s) for s in summary)
        found[check] = {"rc": rc, "seconds": round(time.time() - t, 1),
                        "summary": summary[-1] if summary else None, "summaries": summary,
                        "child": child[-1] if child else None, "clean": clean}
        (res.out / f"sanitizer-{check}.log").write_text(out[-20000:])
        res.line(f"  {check}: {' / '.join(summary) if summary else 'no summary line'} (rc {rc}, "
                 f"{found[check]['seconds']} s; "
                 f"{child[-1] if child else 'the child said nothing'})")
    return found


def sanitizer_child(obj: str) -> None:
    """One call of the model ``obj`` (no torch: the sanitizer sees xlac's work only)."""
    import xlac
    m = xlac.load(obj)
    x = np.random.default_rng(0).standard_normal(m.inputs[0].shape).astype(m.inputs[0].dtype)
    y, = m(x)
    print(f"child: ran {m.name}, output {list(y.shape)}, finite {bool(np.isfinite(y).all())}",
          flush=True)


# -- step 5 -------------------------------------------------------------------------------------

def timed(torch, emulate: bool, fn, runs: int, warmup: int, seconds: float = MEASURE_SECONDS):
    """(median ms, runs) of ``fn`` after two calls and up to ``warmup`` more: each run
    synchronized, timed with CUDA events (perf_counter where emulated). Fewer warm-up
    calls and runs where they would take more than a quarter of ``seconds`` and
    ``seconds``: a model slower than ``seconds`` a run gets one call and one run."""
    def once() -> float:
        t = time.perf_counter()
        fn()
        if not emulate:
            torch.cuda.synchronize()
        return time.perf_counter() - t
    per = once()                  # the first calls: how many runs fit
    if per < seconds / 4:
        per = min(per, once())
    for _ in range(min(warmup, int(0.25 * seconds / max(per, 1e-6)))):
        fn()
    if not emulate:
        torch.cuda.synchronize()
    runs = max(1, min(runs, int(seconds / max(per, 1e-6))))
    samples = []
    if emulate:
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t) * 1e3)
    else:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for _ in range(runs):
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
    return statistics.median(samples), runs


def _capture(torch, fn, warmup: int = 3):
    """A CUDA graph of ``fn`` (warmed up on a side stream first, as torch asks)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def step_latency(cfg: Config, res: Results, torch, dev: Device, entries, built, child) -> list:
    import gpu_models
    if child is not None:
        wait_for_compiles(cfg, res, child, min(60.0, max(0.0, cfg.left("latency") - 120)))
    # Seconds kept for the torch.compile child to time its models after this process.
    reserve = 0.0 if child is None else min(60.0, 0.1 * cfg.budget)
    rows = []
    for k, e in enumerate(entries):
        row = {"model": e.name, "batch": e.batch, "notes": []}
        rows.append(row)
        left = cfg.left("latency") - reserve
        if left <= 5:
            row["notes"].append("skipped: step 5's time spent")
            res.line(f"  {e.key}: skipped, step 5's time spent")
            continue
        x = gpu_models.sample_input(e.name, e.batch)
        # Four variants per entry, and some slack: each gets a share of what is left.
        share = min(MEASURE_SECONDS, max(0.5, left / (len(entries) - k) / 5))
        measure = (lambda fn, share=share: timed(torch, cfg.emulate, fn, cfg.runs, cfg.warmup,
                                                 share))
        if e.model is not None:
            try:
                b = Bound(dev, e.model, x.numpy())
                row["xlac_ms"], row["xlac_runs"] = measure(b.run)
            except Exception as ex:    # noqa: BLE001
                row["notes"].append(f"xlac: {type(ex).__name__}: {ex}")
            if cfg.emulate:
                row["notes"].append("xlac graph: no CUDA graphs with --emulate")
            elif "xlac_ms" in row:
                try:
                    want = b.output()
                    graph = _capture(torch, b.run, warmup=1)   # xlac has no lazy setup
                    b.ys[0].zero_()
                    graph.replay()
                    row["xlac_graph_vs_stream_max_abs"] = float(np.max(np.abs(b.output() - want)))
                    row["xlac_graph_ms"], row["xlac_graph_runs"] = measure(graph.replay)
                    del graph
                except Exception as ex:    # noqa: BLE001
                    row["notes"].append(f"xlac graph: {type(ex).__name__}: {ex}")
        else:
            row["notes"].append("xlac: no CUDA model (step 2)")
        model = built[e.name] if cfg.emulate else built[e.name].cuda()
        xt = dev.tensor(x)
        try:
            with torch.inference_mode():
                row["eager_ms"], row["eager_runs"] = measure(lambda: model(xt))
                if cfg.emulate:
                    row["notes"].append("torch graph: no CUDA graphs with --emulate")
                else:
                    out = {}
                    graph = _capture(torch, lambda: out.__setitem__("y", model(xt)))
                    row["graph_ms"], row["graph_runs"] = measure(graph.replay)
                    del graph, out
        except Exception as ex:    # noqa: BLE001
            row["notes"].append(f"torch: {type(ex).__name__}: {ex}")
        if not cfg.emulate:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        same = row.get("xlac_graph_vs_stream_max_abs")
        res.line(f"  {e.key}: xlac {_ms(row.get('xlac_ms'))} graph {_ms(row.get('xlac_graph_ms'))}"
                 + ("" if same is None else f" (replay vs stream output: max abs {same:.3g})")
                 + f" | torch eager {_ms(row.get('eager_ms'))} graph {_ms(row.get('graph_ms'))}"
                 + (f" ({'; '.join(row['notes'])})" if row["notes"] else ""))
    if child is not None:
        merge_compile_child(cfg, res, child, rows)
    elif cfg.emulate:
        for row in rows:
            row["notes"].append("torch.compile: not run with --emulate (--with-compile runs it)")
    for row in rows:
        if row.get("xlac_graph_ms") and row.get("graph_ms"):
            row["ratio_xlac_graph_to_torch_graph"] = row["xlac_graph_ms"] / row["graph_ms"]
    return rows


def _ms(v) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def table(rows) -> list[str]:
    lines = ["| model | batch | xlac ms | xlac graph ms | eager ms | graph ms | compile ms | "
             "xlac graph / torch graph |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = r.get("ratio_xlac_graph_to_torch_graph")
        lines.append(f"| {r['model']} | {r['batch']} | {_ms(r.get('xlac_ms'))} | "
                     f"{_ms(r.get('xlac_graph_ms'))} | {_ms(r.get('eager_ms'))} | "
                     f"{_ms(r.get('graph_ms'))} | {_ms(r.get('compile_ms'))} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    return lines


def reference_table(rows) -> list[str]:
    lines = ["| model (batch 1) | eager ms / H100 ref | graph ms / H100 ref | "
             "compile ms / H100 ref |", "|---|---:|---:|---:|"]
    for r in rows:
        if r["batch"] != 1 or r["model"] not in H100_REFERENCE:
            continue
        ref = H100_REFERENCE[r["model"]]
        cells = [f"{_ms(r.get(k))} / {v}"
                 for k, v in zip(("eager_ms", "graph_ms", "compile_ms"), ref)]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
    return lines


# -- torch.compile, in a child process ------------------------------------------------------------

def start_compile_child(cfg: Config, res: Results):
    jsonl = cfg.work / "torch_compile.jsonl"
    go = cfg.work / "torch_compile.go"
    log = open(res.out / "torch_compile.log", "w")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--torch-compile-child",
           "--work", str(cfg.work), "--models", ",".join(cfg.models),
           "--batches", ",".join(map(str, cfg.batches)), "--runs", str(cfg.runs),
           "--warmup", str(cfg.warmup), "--deadline", str(cfg.deadline("latency") - 3)]
    if cfg.emulate:
        cmd.append("--emulate")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    res.line(f"  torch.compile child started (pid {proc.pid}); it compiles while steps 2-4 run")
    return {"proc": proc, "jsonl": jsonl, "go": go, "log": log}


def _child_events(child) -> list[dict]:
    try:
        return [json.loads(s) for s in child["jsonl"].read_text().splitlines() if s.strip()]
    except (OSError, ValueError):
        return []


def wait_for_compiles(cfg: Config, res: Results, child, most_s: float) -> None:
    """Before timing: give the child up to ``most_s`` more seconds to finish compiling, so
    its compiles do not load the CPU while this process times."""
    t = time.time()
    while time.time() - t < most_s and child["proc"].poll() is None:
        if any(ev.get("event") == "all-compiled" for ev in _child_events(child)):
            break
        time.sleep(0.5)
    done = [ev for ev in _child_events(child) if ev.get("event") == "compiled"]
    still = child["proc"].poll() is None and not any(
        ev.get("event") == "all-compiled" for ev in _child_events(child))
    res.line(f"  torch.compile child: {len(done)} model(s) compiled"
             + (f"; still compiling after a {time.time() - t:.0f} s wait (its compiles "
                "overlap the xlac and eager timings below)" if still else ""))


def merge_compile_child(cfg: Config, res: Results, child, rows) -> None:
    child["go"].write_text("go")
    proc = child["proc"]
    try:
        proc.wait(timeout=max(1.0, cfg.left("latency")))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        res.note("torch.compile child killed at step 5's deadline")
    child["log"].close()
    events = _child_events(child)
    by_key = {(r["model"], r["batch"]): r for r in rows}
    for ev in events:
        r = by_key.get((ev.get("model"), ev.get("batch")))
        if r is None:
            continue
        if ev["event"] == "compiled":
            r["compile_build_s"] = ev["seconds"]
        elif ev["event"] == "timed":
            r["compile_ms"], r["compile_runs"] = ev["ms"], ev["runs"]
        elif ev["event"] == "error":
            r["notes"].append(f"torch.compile: {ev['error']}")
            res.line(f"  {r['model']}/b{r['batch']}: torch.compile: {ev['error']}")
    for r in rows:
        if "compile_ms" not in r and not any(n.startswith("torch.compile") for n in r["notes"]):
            r["notes"].append("torch.compile: skipped, not compiled and timed within the budget")
    tail = _last_line(Path(child["log"].name).read_text(errors="replace")) or "(none)"
    res.line(f"  torch.compile child: rc {proc.returncode}; "
             f"{sum(1 for r in rows if 'compile_ms' in r)} timed; last log line: {tail}")


def torch_compile_child(args) -> None:
    import torch

    import gpu_models
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    work = Path(args.work)
    jsonl = open(work / "torch_compile.jsonl", "a", buffering=1)

    def emit(**kw):
        jsonl.write(json.dumps(kw) + "\n")
        jsonl.flush()
    compiled = []
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            if time.time() > args.deadline - 20:
                emit(event="error", model=name, batch=batch,
                     error="skipped: no time left to compile")
                continue
            try:
                t = time.time()
                model, _ = gpu_models.build(name, batch)
                x = gpu_models.sample_input(name, batch)
                if not args.emulate:
                    model, x = model.cuda(), x.cuda()
                # dynamic=False: batch 32 after batch 1 of the same class would else be
                # recompiled with a dynamic batch dimension.
                fn = torch.compile(model, mode="reduce-overhead", dynamic=False)
                with torch.inference_mode():
                    for _ in range(3):      # compile, then record the CUDA graph
                        fn(x)
                if not args.emulate:
                    torch.cuda.synchronize()
                emit(event="compiled", model=name, batch=batch, seconds=round(time.time() - t, 1))
                compiled.append((name, batch, fn, x))
            except Exception as ex:    # noqa: BLE001
                emit(event="error", model=name, batch=batch,
                     error=f"{type(ex).__name__}: {str(ex)[:300]}")
    emit(event="all-compiled")
    go = work / "torch_compile.go"
    while not go.exists() and time.time() < args.deadline:
        time.sleep(0.2)
    for k, (name, batch, fn, x) in enumerate(compiled):
        left = args.deadline - time.time()
        if left < 2:
            emit(event="error", model=name, batch=batch, error="skipped: no time left to time")
            continue
        try:
            with torch.inference_mode():
                ms, runs = timed(torch, args.emulate, lambda: fn(x), args.runs, args.warmup,
                                 min(MEASURE_SECONDS, left / (len(compiled) - k) / 1.5))
            emit(event="timed", model=name, batch=batch, ms=ms, runs=runs)
        except Exception as ex:    # noqa: BLE001
            emit(event="error", model=name, batch=batch,
                 error=f"{type(ex).__name__}: {str(ex)[:300]}")


def summarize(data: dict, cfg: Config) -> dict:
    wanted = [f"{m}/b{b}" for m in cfg.models for b in cfg.batches]
    rows = data.get("correctness") or []
    checked = {f"{r['model']}/b{r['batch']}": r for r in rows if "vs_torch" in r}
    passed = [k for k in wanted if k in checked and checked[k]["vs_torch"]["pass"]
              and checked[k].get("vs_xlac_cpu", {"pass": False})["pass"]]
    out = {"outputs match (vs torch and vs xlac cpu)": f"{len(passed)}/{len(wanted)}",
           "all outputs match": len(passed) == len(wanted),
           "not matching or not checked": [k for k in wanted if k not in passed]}
    san = data.get("sanitizer") or {}
    if not cfg.emulate:
        out["sanitizer clean"] = bool(san) and all(
            isinstance(v, dict) and v.get("clean") for v in san.values())
    lat = data.get("latency") or []
    out["latency rows with xlac timed"] = f"{sum(1 for r in lat if 'xlac_ms' in r)}/{len(wanted)}"
    ratios = [r["ratio_xlac_graph_to_torch_graph"] for r in lat
              if r.get("ratio_xlac_graph_to_torch_graph")]
    if ratios:
        out["geomean xlac graph / torch graph"] = round(float(np.exp(np.mean(np.log(ratios)))), 3)
    return out


# -- main ---------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT") or "gpu-results",
                   help="output folder (default: $OUT, else ./gpu-results)")
    p.add_argument("--emulate", action="store_true",
                   help="no GPU: target cuda-emulated, the stand-in driver, small models")
    p.add_argument("--models", help="comma-separated, of " + ", ".join(ORDER)
                   + " (default: all; with --emulate: " + ", ".join(SMALL) + ")")
    p.add_argument("--batches", help="comma-separated (default 1,32; with --emulate: 1)")
    p.add_argument("--runs", type=int, help="timed runs per variant (default 200; emulated 5)")
    p.add_argument("--warmup", type=int, help="warm-up runs (default 20; emulated 2)")
    p.add_argument("--budget", type=float, default=450.0,
                   help="seconds for the whole run (default 450)")
    p.add_argument("--work", help="folder for the ONNX files and objects (default: a "
                   "temporary folder; they stay out of --out, which comes back)")
    p.add_argument("--no-install", action="store_true", help="skip the pip installs")
    p.add_argument("--with-compile", action="store_true",
                   help="with --emulate, run torch.compile too (inductor on the CPU: slow)")
    p.add_argument("--sanitizer-child", metavar="OBJ", help=argparse.SUPPRESS)
    p.add_argument("--torch-compile-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.sanitizer_child:
        sanitizer_child(args.sanitizer_child)
        return 0
    if args.torch_compile_child:
        torch_compile_child(args)
        return 0
    out = Path(args.out)
    res = Results(out)
    res.line(f"# xlac GPU check, {time.strftime('%Y-%m-%d %H:%M:%S')}"
             + (" (--emulate)" if args.emulate else ""))
    if not args.emulate and not args.no_install:
        ensure_installed(res.line)
    models = args.models.split(",") if args.models else list(SMALL if args.emulate else ORDER)
    unknown = [m for m in models if m not in ORDER]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}: pick from {', '.join(ORDER)}")
    models = [m for m in ORDER if m in models]
    batches = [int(b) for b in (args.batches or ("1" if args.emulate else "1,32")).split(",")]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="xlac-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = Config(args.emulate, models, batches,
                 args.runs or (5 if args.emulate else 200),
                 args.warmup if args.warmup is not None else (2 if args.emulate else 20),
                 args.budget, work)
    res.data["config"] = {"emulate": cfg.emulate, "models": models, "batches": batches,
                          "runs": cfg.runs, "warmup": cfg.warmup, "budget_s": cfg.budget,
                          "rtol": RTOL, "atol": ATOL, "work": str(work)}
    if cfg.emulate and not os.environ.get("XLAC_CUDA_DRIVER"):
        sys.path.insert(0, str(ROOT / "tests" / "cuda"))
        from fake_driver import build_fake_driver
        os.environ["XLAC_CUDA_DRIVER"] = str(build_fake_driver(work / "fake-cuda"))

    def step(key: str, title: str, fn, store=lambda v: v):
        res.line(f"\n## {title}")
        t = time.time()
        try:
            value = fn()
            status = "ok"
        except SystemExit as ex:
            res.line(f"  stopped: {ex}")
            res.data["steps"][key] = {"seconds": round(time.time() - t, 1),
                                      "status": f"stopped: {ex}"}
            res.save()
            raise
        except Exception as ex:    # noqa: BLE001
            value, status = None, f"{type(ex).__name__}: {ex}"
            res.line(f"  step failed: {status}")
            (out / f"traceback-{key}.txt").write_text(traceback.format_exc())
        res.data["steps"][key] = {"seconds": round(time.time() - t, 1), "status": status}
        res.data[key] = store(value)
        res.save()
        return value

    import torch
    children: list = []
    try:
        return run_steps(args, cfg, res, step, torch, lambda c: children.append(c))
    finally:
        for c in children:       # the torch.compile child, where a step failed before its end
            if c["proc"].poll() is None:
                c["proc"].kill()
                c["proc"].wait()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def run_steps(args, cfg: Config, res: Results, step, torch, started) -> int:
    out = res.out
    env = step("environment", "1. Environment", lambda: step_environment(cfg, res, torch))
    if env is None:
        return 1
    child = None
    if not cfg.emulate or args.with_compile:
        child = start_compile_child(cfg, res)
        started(child)
    import gpu_models
    built = {name: gpu_models.build(name, 1)[0] for name in cfg.models}
    dev = Device(torch, cfg.emulate)
    entries = step("models", f"2. Models (xlac target {'cuda-emulated' if cfg.emulate else 'cuda'}"
                   f", {env['arch']})", lambda: step_models(cfg, res, torch, env["arch"], built),
                   lambda v: {e.key: e.info for e in v or []}) or []
    step("correctness", "3. Correctness",
         lambda: step_correctness(cfg, res, torch, dev, entries, built))
    if cfg.emulate:
        res.line("\n## 4. compute-sanitizer\n  skipped: --emulate")
        res.data["sanitizer"] = {"skipped": "--emulate"}
    else:
        step("sanitizer", "4. compute-sanitizer (DS-CNN, batch 1, one call)",
             lambda: step_sanitizer(cfg, res, entries))
    how = "perf_counter, synchronous emulation" if cfg.emulate else "CUDA events"
    rows = step("latency", f"5. Latency (median ms, {how}; up to {cfg.runs} runs after "
                f"{cfg.warmup} warm-up)",
                lambda: step_latency(cfg, res, torch, dev, entries, built, child))
    if rows:
        res.line("")
        for line in table(rows):
            res.line(line)
        if not cfg.emulate:
            res.line("\nPyTorch here against GPU.md's H100 reference (batch 1):\n")
            for line in reference_table(rows):
                res.line(line)
    res.data["summary"] = summary = summarize(res.data, cfg)
    res.line("\n## Summary")
    for k, v in summary.items():
        res.line(f"  {k}: {v}")
    res.data["elapsed_s"] = round(time.time() - cfg.start, 1)
    res.save()
    res.line(f"\n## 6. results.json written to {out / 'results.json'} "
             f"({res.data['elapsed_s']} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
