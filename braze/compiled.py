"""braze.compile: a model (or function, or IR graph) as native code, called like the model.

    compiled = braze.compile(model, example_x)     # trace, optimize, generate code, load
    y = compiled(x)                                 # one foreign call per thread; numpy in, numpy out

Steps: trace the forward pass on the example inputs (braze.trace), then the one compile path
(runtime/compile_path.py): drop the buffer-update outputs (running statistics are a training concern), optimize
with the pass pipeline (braze.optimize, "inference" by default), plan memory, build one LLVM module for the whole
graph, compile it through the JIT (an engine per compiled library) and the disk cache, and wrap it in a runtime
Executable. A Graph passed in goes through the same pipeline (pipeline=None compiles a graph braze.optimize
returned as it is). The weights are copied when a signature is compiled: later changes to the model do not reach
code compiled before them. Keyword arguments other than compile's own are options of the pipeline's passes;
unknown ones are refused.

With example inputs, the signature (shapes and dtypes) is fixed and every call is checked against it, with errors
naming the input and the expected type. Without them, each new signature compiles on its first call and is kept, as
jax.jit does. A fixed signature's compile ends with two calls on zero inputs when a call is short (the "warm" stage
of timings, runtime Executable.warm): the first call then costs what the later ones do. Called with braze Tensors, a
compiled module returns Tensors; with numpy arrays, numpy arrays: one value for a single output, a tuple for
several.

Training mode: compiled code runs inference only. A model in training mode raises a BrazeError unless
`mode="eval"` (or `eval=True`) is given. What is traced is always the model's valid() snapshot (dropout off,
batch norm from running statistics, every parameter frozen, so LoRA and quantized weights fold); the model itself
is left as it is.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from braze.frontend.creation import from_numpy
from braze.frontend.nn.module import Module
from braze.frontend.tensor import Tensor
from braze.frontend.trace import trace
from braze.ir.errors import BrazeError
from braze.ir.graph import Graph
from braze.ir.passes.manager import check_options
from braze.ir.types import TensorType, as_dtype
from braze.runtime.threads import check_threads

if TYPE_CHECKING:  # codegen loads LLVM: imported on first compile, not with braze
    from braze.codegen.module_builder import KernelInfo
    from braze.runtime.executable import Executable
    from braze.runtime.timings import CompileTimings

Signature = tuple[tuple[tuple[int, ...], str], ...]


class CompiledModule:
    """Native code for a model, called like the model; one Executable per input signature (see the module doc)."""

    def __init__(self, source: Module | Callable[..., Any] | Graph, *, pipeline: str | Sequence[str],
                 threads: int | None, fixed: bool, options: dict[str, Any], untrusted: bool = False,
                 verified: bool = False) -> None:
        self._source, self._pipeline, self._threads = source, pipeline, threads
        self._fixed, self._options, self._untrusted, self._verified = fixed, options, untrusted, verified
        self._executables: dict[Signature, Executable] = {}
        self._latest: Executable | None = None
        self._lock = threading.Lock()

    # --- calls -----------------------------------------------------------------------------------------------
    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        """Run the compiled code; Tensors in give Tensors out, arrays in give arrays out. `out=` (an array, or a
        tuple of arrays for several outputs; numpy arrays of the outputs' shapes and dtypes, C-contiguous) receives
        the results, which are then returned: a call with out= allocates nothing."""
        for x in inputs:
            if isinstance(x, Tensor):
                return self._call_tensors(inputs, out)
        executable = self._latest if self._fixed else self._executable_for(inputs)
        outputs = executable.run(inputs, out)
        return outputs[0] if len(outputs) == 1 else outputs

    def _call_tensors(self, inputs: Sequence[Any], out: Any) -> Any:
        arrays = [t.detach().numpy() if isinstance(t, Tensor) else t for t in inputs]
        results = (self._latest if self._fixed else self._executable_for(arrays)).run(arrays, out)
        outputs = results if out is not None else tuple(from_numpy(y) for y in results)
        return outputs[0] if len(outputs) == 1 else outputs

    def _executable_for(self, arrays: Sequence[Any]) -> Executable:
        signature = _signature(arrays)
        executable = self._executables.get(signature)
        if executable is None:
            with self._lock:
                executable = self._executables.get(signature)
                if executable is None:
                    executable = self._compile([np.asarray(x) for x in arrays])
                    self._executables[signature] = executable
        self._latest = executable
        return executable

    def _compile(self, examples: Sequence[np.ndarray] | None) -> Executable:
        from braze.runtime.compile_path import collector_paused, compile_graph
        from braze.runtime.timings import CompileTimings
        timings = CompileTimings()
        with collector_paused():  # the trace's objects too live until the compile ends
            if isinstance(self._source, Graph):
                graph = self._source
            else:
                with timings.stage("trace"):
                    graph = _trace(self._source, examples)
            return compile_graph(graph, pipeline=self._pipeline, threads=self._threads, untrusted=self._untrusted,
                                 verified=self._verified, options=self._options, timings=timings)

    # --- inspection ------------------------------------------------------------------------------------------
    @property
    def executable(self) -> Executable:
        """The executable of the fixed signature, or of the signature called last."""
        if self._latest is None:
            raise BrazeError("nothing is compiled yet: call the compiled module once, or pass example inputs "
                             "to braze.compile")
        return self._latest

    @property
    def graph(self) -> Graph:
        """The optimized graph that was compiled (for the fixed signature, or the one called last)."""
        return self.executable.graph

    @property
    def timings(self) -> CompileTimings:
        """Where the compile of the fixed signature (or the one called last) spent its time, stage by stage; str()
        of it is a table."""
        return self.executable.timings

    @property
    def threads(self) -> int:
        """Threads a call uses (see braze.runtime.threads for how they are chosen)."""
        return self.executable.threads

    def signatures(self) -> list[Signature]:
        """The input signatures compiled so far: per input, its shape and dtype name."""
        return list(self._executables)

    def kernels(self) -> list[KernelInfo]:
        """The kernels the entry calls, in order: name, node index, op (or fused kind), results, scratch bytes."""
        return list(self.executable.built.kernels)

    def llvm_ir(self, kernel: str | None = None) -> str:
        """The optimized LLVM IR of the whole module, or of one kernel (a name from kernels())."""
        executable = self.executable
        if kernel is not None:
            executable.built.kernel(kernel)
        return executable.library.llvm_ir(kernel)

    def asm(self, kernel: str | None = None) -> str:
        """The host assembly of the whole module, or of one kernel (a name from kernels())."""
        executable = self.executable
        if kernel is not None:
            executable.built.kernel(kernel)
        return executable.library.asm(kernel)

    def __repr__(self) -> str:
        what = self._source.name if isinstance(self._source, Graph) else type(self._source).__name__
        if self._latest is None:
            return f"CompiledModule({what}, not compiled yet)"
        return f"CompiledModule({what}, {self._latest!r})"


def compile(model_or_graph: Module | Callable[..., Any] | Graph, *example_inputs: Any,
            pipeline: str | Sequence[str] | None = "inference", threads: int | None = None, mode: str | None = None,
            eval: bool = False, **options: Any) -> CompiledModule:
    """Compile a Module, a function of tensors or an ir.Graph to native code (see the braze.compiled doc).

    example_inputs fix the signature and compile now; without them a Module or function compiles on each new
    signature's first call (a Graph always compiles now: its signature is in it). pipeline: the pass pipeline
    (braze.optimize), or None for a graph braze.optimize returned. threads: threads per call (default:
    BRAZE_NUM_THREADS, else chosen by the graph's size). mode="eval" (or eval=True) compiles a model in training
    mode as its valid() snapshot. Other keyword arguments are options for the pipeline's passes (e.g. policy="keep"
    for fold_reparameterizations, or quantized_weights="packed" to keep quantized linear weights packed, read by
    kernels that dequantize inside their loops); any other name is refused with a BrazeError listing the valid
    ones.
    """
    check_threads(threads)
    from braze.runtime.compile_path import compile_passes
    passes = compile_passes(pipeline)
    check_options(passes, options, "braze.compile", ("pipeline", "threads", "mode", "eval"))
    if mode not in (None, "eval", "train"):
        raise BrazeError(f"mode must be None, 'eval' or 'train', got {mode!r}")
    if pipeline is None and not isinstance(model_or_graph, Graph):
        raise BrazeError("braze.compile: pipeline=None compiles a graph braze.optimize returned; a model or function "
                         "is traced and needs a pipeline (default 'inference')")
    want_eval = eval or mode == "eval"
    source = inference_source(model_or_graph, want_eval, mode == "train", options, passes)
    fixed = bool(example_inputs) or isinstance(source, Graph)
    compiled = CompiledModule(source, pipeline=pipeline, threads=threads, fixed=fixed, options=options)
    if fixed:
        examples = None if isinstance(source, Graph) else [example_array(x, k) for k, x in enumerate(example_inputs)]
        if isinstance(source, Graph) and example_inputs:
            raise BrazeError("braze.compile: a Graph has its input types in it; pass no example inputs")
        executable = compiled._compile(examples)
        compiled._latest = executable
        compiled._executables[_types_signature(executable.input_types)] = executable
        _warm(compiled, executable)
    return compiled


def compile_untrusted(graph: Graph, threads: int | None = None, *, verified: bool = False) -> CompiledModule:
    """Compile an optimized graph that came from outside (a file, IR text) as it is: re-verified (unless the caller
    has just `verified` it) and re-planned."""
    check_threads(threads)
    compiled = CompiledModule(graph, pipeline=None, threads=threads, fixed=True, options={}, untrusted=True,
                              verified=verified)
    executable = compiled._compile(None)
    compiled._latest = executable
    compiled._executables[_types_signature(executable.input_types)] = executable
    _warm(compiled, executable)
    return compiled


def inference_source(source: Any, want_eval: bool, want_train: bool, options: dict[str, Any],
                      passes: Sequence[str]) -> Any:
    """The model to trace (its valid() snapshot when asked), after refusing training mode; shared by every export."""
    train_error = ("braze.compile builds inference code; call model.eval() first, pass mode='eval' to compile the "
                   "model's evaluation snapshot, or compile training with braze.compile_train_step")
    if want_train:
        raise BrazeError(f"braze.compile(mode='train'): {train_error}")
    if isinstance(source, Graph):
        training = [f.path for f in source.flags() if f.value]
        if training and not want_eval:
            raise BrazeError(f"graph @{source.name} was traced in training mode (flags {', '.join(training)} are "
                             f"on); {train_error}")
        if want_eval and "specialize_flags" in passes:
            options.setdefault("flags", False)
        return source
    if isinstance(source, Module):
        training = [path or "<root>" for path, m in source.named_modules() if m.training]
        if training and not want_eval:
            shown = ", ".join(training[:4]) + (", ..." if len(training) > 4 else "")
            raise BrazeError(f"braze.compile: the {type(source).__name__} is in training mode (modules {shown}); "
                             f"{train_error}")
        # The snapshot's parameters are frozen: the inference pipeline folds only frozen reparameterizations.
        return source.valid()
    if not callable(source):
        raise BrazeError(f"braze.compile: expected a Module, a function or an ir.Graph, got {type(source).__name__}")
    return source


def _trace(source: Any, examples: Sequence[np.ndarray] | None) -> Graph:
    if examples is None:
        raise BrazeError("braze.compile: tracing needs example inputs")
    return trace(source, *examples)


def _warm(compiled: CompiledModule, executable: Executable) -> None:
    """The executable's warm-up calls (Executable.warm), timed as the compile's "warm" stage, made through the module's
    own call: after calls of the executable alone, the batch-1 MLP's first call through the module read 38-48 us
    against 33-35 later, the Python of that call being run for the first time (warmed through it: 34-44 against
    33-38)."""
    with executable.timings.stage("warm"):
        executable.warm(lambda zeros: compiled(*zeros))


def example_array(x: Any, k: int, caller: str = "braze.compile") -> np.ndarray:
    """Example input k (a Tensor or an array) as an array; a BrazeError naming `caller` for anything else."""
    if isinstance(x, Tensor):
        return x.detach().numpy()
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x)
    raise BrazeError(f"{caller}: example input {k} is a {type(x).__name__}; pass braze Tensors or numpy arrays")


def _signature(arrays: Sequence[Any]) -> Signature:
    """Shapes and dtype names of call inputs; raises a BrazeError naming an input that is not an array."""
    out = []
    for k, x in enumerate(arrays):
        if not isinstance(x, (np.ndarray, np.generic)):
            raise BrazeError(f"input {k}: expected a numpy array or a braze Tensor, got {type(x).__name__}")
        x = np.asarray(x)
        try:
            dtype = as_dtype(x.dtype)
        except BrazeError as exc:
            raise type(exc)(f"input {k}: {exc}") from None
        out.append((tuple(x.shape), dtype.numpy_name))
    return tuple(out)


def _types_signature(types: Sequence[TensorType]) -> Signature:
    return tuple((t.shape, t.dtype.numpy_name) for t in types)
