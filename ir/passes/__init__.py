"""braze.ir.passes: Graph -> Graph optimization passes, the pattern-rewrite helper and the pass manager.

`optimize(graph, "inference")` runs the default pipeline (shared/DESIGN.md); `register_pass` adds a user pass that
pipelines can name. Built-in passes are imported when a pipeline first names them.
"""
from .manager import (BUILTIN_PASSES, PIPELINES, PassContext, PassManager, PassRecord, PassReport, get_pass,
                      optimize, pass_names, register_pass)
from .rewrite import Match, Rule, apply_rules, rule

__all__ = ["BUILTIN_PASSES", "PIPELINES", "Match", "PassContext", "PassManager", "PassRecord", "PassReport", "Rule",
           "apply_rules", "get_pass", "optimize", "pass_names", "register_pass", "rule"]
