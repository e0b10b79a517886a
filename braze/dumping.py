"""`braze.dump`: readable IR of a model or graph, after any pass pipeline, one stage or every stage."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from braze.ir.errors import BrazeError
from braze.ir.graph import Graph

# the graphs of a compiled training step, in the order they are built
TRAINING_STAGES = ("forward", "backward", "step")


def stages(graph: Graph, passes: str | Sequence[str] | None) -> list[tuple[str, Graph]]:
    """("traced", graph) followed by ("after <pass>", graph) for each pass of the pipeline."""
    from braze.ir.passes import PassManager
    from braze.ir.passes.manager import resolve_pipeline
    out = [("traced", graph)]
    if passes:
        current = graph
        for name in resolve_pipeline(passes):
            current = PassManager([name]).run(current)
            out.append((f"after {name}", current))
    return out


def render(graph: Graph, format: str = "text", provenance: bool = False) -> str:
    """One graph as IR text (optionally with provenance), Graphviz dot, or a size summary."""
    if format not in ("text", "dot", "summary"):
        raise ValueError(f"format must be 'text', 'dot' or 'summary', got {format!r}")
    text = graph.to_dot() if format == "dot" else graph.summary() if format == "summary" else graph.dump(provenance)
    return text if text.endswith("\n") else text + "\n"


def dump(model_or_graph: Any, *example_inputs: Any, passes: str | Sequence[str] | None = None,
         after_each: bool = False, format: str = "text", provenance: bool = False) -> str:
    """The IR of a graph, or of a module traced on `example_inputs`, after the pass pipeline `passes`.

    With after_each, every stage is shown under a `# traced` / `# after <pass>` header line, so the effect of each
    pass can be read in order; otherwise only the last stage.
    """
    if isinstance(model_or_graph, Graph):
        graph = model_or_graph
    else:
        from braze.frontend.trace import trace
        graph = trace(model_or_graph, *example_inputs)
    shown = stages(graph, passes)
    if not after_each:
        return render(shown[-1][1], format, provenance)
    return "".join(f"# {label}\n" + render(g, format, provenance) for label, g in shown)


def training_stage(model: Any, loss_fn: Callable[[Any, Any], Any], optimizer: Any, batch: Sequence[Any],
                   stage: str) -> Graph:
    """A graph of the training step compile_train_step builds: "forward" (the traced loss, dropout seeds as
    inputs, quantized bases read packed), "backward" (with the trainable params' gradients) or "step" (with the
    optimizer's update)."""
    from braze.ir.autodiff import backward_graph
    from braze.ir.train_step import dropout_seeds_as_inputs
    from braze.train_step import differentiated_forward, train_step_graph
    from braze.training import trace_loss
    if stage not in TRAINING_STAGES:
        raise BrazeError(f"training_stage: stage must be one of {', '.join(TRAINING_STAGES)}, got {stage!r}")
    if stage == "step":
        return train_step_graph(model, loss_fn, optimizer, *batch)
    forward = differentiated_forward(dropout_seeds_as_inputs(trace_loss(model, loss_fn, *batch)))
    return forward if stage == "forward" else backward_graph(forward)
