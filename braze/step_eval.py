"""A training step's evaluation mode: the model's outputs with every flag off, from the step's own traced graph.

The step traces `loss_fn(model(*inputs), target)` once, with the model's outputs kept as further outputs
(trace_loss(keep_output=True)). `eval_graph` takes those outputs, fixes every flag to false (dropout off, batch
norm on running statistics) and drops the inputs evaluation does not read (the target, the dropout seeds). It is
compiled on the first `step.eval(...)`, its params kept as leaves, and before each call after training steps the
step's current weights and buffers are copied into it, so it always evaluates the weights being trained.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from braze.frontend.tensor import Tensor
from braze.ir.errors import BrazeError
from braze.ir.graph import Graph
from braze.ir.passes import optimize
from braze.ir.train_step import input_roles

if TYPE_CHECKING:
    from braze.runtime.executable import Executable

# the training pipeline without specialize_flags (already done) and fold_reparameterizations: every param stays a
# leaf, so the trained values can be written into it
EVAL_PASSES = ("decompose", "constant_fold", "simplify", "cse", "dce", "fuse")


def eval_graph(forward: Graph) -> Graph:
    """The model's outputs of a graph traced by trace_loss(keep_output=True), every flag false, reading only the
    model's inputs (see the module doc)."""
    roles = list(forward.attributes["outputs"])
    outputs = [v for k, (role, v) in enumerate(zip(roles, forward.outputs)) if role == "output" and k > 0]
    meta = {key: value for key, value in forward.attributes.items() if key not in ("outputs", "inputs")}
    graph = forward.replace(outputs=tuple(outputs), attributes={**meta, "outputs": ["output"] * len(outputs)})
    graph = optimize(graph, ("specialize_flags", "dce"), flags=False)
    batch = [v for v, role in zip(graph.inputs, input_roles(forward)) if role == "batch"]
    return graph.replace(inputs=tuple(batch[:-1]))  # the model's inputs: the batch without its target


class StepEvaluator:
    """Runs the eval graph of a step, compiled on first use, on the weights the step holds now."""

    def __init__(self, forward: Graph, threads: int | None) -> None:
        self.graph = eval_graph(forward)
        self._threads, self._executable, self._synced_at = threads, None, -1

    def __call__(self, step_executable: Any, trained: set[str], calls: int, inputs: tuple[Any, ...]) -> Any:
        """The model's output(s) on `inputs` with the step executable's values of the `trained` leaves, which
        have changed `calls` times."""
        executable = self._compiled()
        if self._synced_at != calls:
            paths = trained & {p.path for p in executable.graph.params()}
            executable.write_weights({path: step_executable.weight(path) for path in paths})
            self._synced_at = calls
        arrays = [x.detach().numpy() if isinstance(x, Tensor) else x for x in inputs]
        if len(arrays) != len(self.graph.inputs):
            raise BrazeError(f"TrainStep.eval: the model takes {len(self.graph.inputs)} input(s) (the batch without "
                             f"its target), got {len(arrays)}")
        outputs = executable.run(arrays)
        return outputs[0] if len(outputs) == 1 else outputs

    def _compiled(self) -> Executable:
        if self._executable is None:
            from braze.runtime.compile_path import compile_graph
            self._executable = compile_graph(self.graph, pipeline=EVAL_PASSES, threads=self._threads)
        return self._executable
