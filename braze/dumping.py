"""`braze.dump`: readable IR of a model or graph, after any pass pipeline, one stage or every stage."""
from __future__ import annotations

from typing import Any, Sequence

from braze.ir.graph import Graph


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
