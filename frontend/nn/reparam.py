"""Parameter reparameterizations: the state Param.val() composes with a stored base, the Reparameterizer protocol
that attaches it, and how module traversals reach the nested values of that state.

A reparameterization (a LoraAdapter is the built-in one) owns nested parameters and flags, named by a suffix
of the parameter's path: the adapter of `fc.weight` holds `fc.weight.lora_a`, `fc.weight.lora_b` and its dropout
flag `fc.weight.lora_dropout`. Module traversals (named_parameters, named_param_slots, named_flags, visit, map,
train/eval/valid, records, state dicts) list them right after their parameter, so optimizers update them,
records save them and visitors see them. A mapper's map_float is called on the structural base with the
reparameterization detached, then on each nested value, and the state is reattached to what the mapper returned.

A quantized base (QuantizedTensor) is not a reparameterization: it is how the base is stored.
"""
from __future__ import annotations

import abc
import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from braze.ir.errors import BrazeError

from ..autodiff import no_grad
from ..tensor import Tensor
from .flag import Flag
from .param import Param
from .visitor import join_path

if TYPE_CHECKING:
    from .group import ParamGroup
    from .module import Module
    from .quant import QuantizedTensor, Quantizer

Offered = tuple[str, Param, "Module | None"]  # (path, parameter, owning module; None for a lone Param)


class Reparameterization(abc.ABC):
    """State attached to a parameter: nested parameters and flags by name, and how they compose with the base.

    Subclasses implement `compose(base)` with registered ops (through `dispatch.apply`) so autodiff reaches the
    nested parameters and a tracer records the composition; `dropout` > 0 asks F.linear / F.conv2d for the
    input-dropout path of a subclass that provides `linear` / `conv2d` (LoRA's).
    """

    dropout = 0.0

    def __init__(self, params: Mapping[str, Param], flags: Mapping[str, Flag] | None = None) -> None:
        self.params: dict[str, Param] = dict(params)
        self.flags: dict[str, Flag] = dict(flags or {})

    @abc.abstractmethod
    def compose(self, base: Tensor) -> Tensor:
        """The effective value for the stored `base`."""

    def named_params(self) -> Iterator[tuple[str, Param]]:
        """(path suffix, Param) of the nested parameters, e.g. (".lora_a", a)."""
        return ((f".{name}", p) for name, p in self.params.items())

    def named_flags(self) -> Iterator[tuple[str, Flag]]:
        """(path suffix, Flag) of the nested flags, e.g. (".lora_dropout", flag)."""
        return ((f".{name}", f) for name, f in self.flags.items())

    def metadata(self) -> dict[str, Any]:
        """What a record stores about this state beside its tensors, to check a loading module against."""
        return {"kind": type(self).__name__}

    def replaced(self, params: Mapping[str, Param], flags: Mapping[str, Flag]) -> Reparameterization:
        """The same state with other nested values (same names)."""
        new = copy.copy(self)
        new.params, new.flags = dict(params), dict(flags)
        return new

    def clone(self) -> Reparameterization:
        """A copy whose nested values are clones (same ids, shared arrays and lazy states)."""
        return self.replaced({k: p.clone() for k, p in self.params.items()},
                             {k: f.clone() for k, f in self.flags.items()})

    def __deepcopy__(self, memo: dict[int, Any]) -> Reparameterization:
        return self.replaced({k: copy.deepcopy(p, memo) for k, p in self.params.items()},
                             {k: copy.deepcopy(f, memo) for k, f in self.flags.items()})

    def set_mode(self, training: bool) -> None:
        """Follow the parameter into (True) or out of (False) training: nested parameters' autodiff, nested
        flags' configured value applied or their effective value disabled."""
        for p in self.params.values():
            p._set_autodiff(training)
        for f in self.flags.values():
            if training:
                f.apply_configured()
            else:
                f.disable()


class Reparameterizer(abc.ABC):
    """Attaches reparameterizations: Module.apply_reparameterization offers it every floating-point parameter."""

    def validate(self, offered: Sequence[Offered]) -> None:
        """Check every offered (path, parameter, owning module) before anything changes; raise to refuse."""

    @abc.abstractmethod
    def reparameterize(self, path: str, param: Param, owner: Module | None) -> Reparameterization | None:
        """Prepare the structural base of `param` (at dotted `path`, registered on `owner`, None for a lone
        Param) and return the state Param.val() should compose with it, or None to leave it without one."""


# --- traversal --------------------------------------------------------------------------------------------------
def own_entries(module: Module, registry: str) -> Iterator[tuple[str, Any]]:
    """(name, value) of a module's own registry ("_parameters", "_buffers" or "_flags"), with the nested values of
    its parameters' reparameterizations: parameters are followed by theirs ("weight", "weight.lora_a", ...),
    and the flags end with the parameters' nested flags ("weight.lora_dropout")."""
    d = module.__dict__
    if registry == "_flags":
        yield from d["_flags"].items()
        for name, p in d["_parameters"].items():
            if p is not None and p._reparam is not None:
                yield from ((name + suffix, f) for suffix, f in p._reparam.named_flags())
        return
    for name, p in d[registry].items():
        yield name, p
        if p is not None and p._reparam is not None:
            yield from ((name + suffix, q) for suffix, q in p._reparam.named_params())


def structural_params(module: Module | Param) -> Iterator[Offered]:
    """(dotted path, Param, owning module) of every registered parameter, each once, without nested ones; a lone
    Param is its own module: ("", param, None)."""
    if isinstance(module, Param):
        yield "", module, None
        return
    seen: set[int] = set()
    for path, owner in module.named_modules():
        for name, p in owner.__dict__["_parameters"].items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                yield join_path(path, name), p, owner


def map_param(mapper: Any, path: str, param: Param) -> Param:
    """The mapper's replacement for `param`: the hook sees the structural base (reparameterization detached),
    then each nested value; the state is reattached, with the mapped nested values, to the result."""
    state = param._reparam
    if state is None:
        return getattr(mapper, f"map_{param._kind()}")(path, param)
    param._reparam = None
    try:
        new = _expect(mapper.map_float(path, param), Param, path)
        if new.lazy_shape != param.lazy_shape:
            raise BrazeError(f"Module.map: the mapper changed {path} from shape {param.lazy_shape} to "
                             f"{new.lazy_shape}, which its {type(state).__name__} no longer fits")
        params = {k: _expect(getattr(mapper, f"map_{p._kind()}")(f"{path}.{k}", p), Param, f"{path}.{k}")
                  for k, p in state.params.items()}
        flags = {k: _expect(mapper.map_flag(f"{path}.{k}", f), Flag, f"{path}.{k}") for k, f in state.flags.items()}
    except BaseException:
        param._reparam = state  # a failed mapping leaves the parameter as it was
        raise
    new._reparam = state.replaced(params, flags)
    return new


def _expect(value: Any, kind: type, path: str) -> Any:
    if not isinstance(value, kind):
        raise BrazeError(f"Module.map: the mapper returned {type(value).__name__} for {path}, a {kind.__name__}; "
                         f"map hooks must return a {kind.__name__}")
    return value


# --- the module operations ----------------------------------------------------------------------------------------
def apply_reparameterization(module: Module | Param, reparameterizer: Reparameterizer,
                             kind: str | None = None) -> Any:
    """Offer every floating-point parameter to the reparameterizer and attach the states it returns; `kind`
    ("Lora", "QLora") names the configuration class the caller requires."""
    if kind is not None:
        from . import lora
        if not isinstance(reparameterizer, getattr(lora, kind)):
            raise BrazeError(f"apply_{kind.lower()}: expected a braze.nn.{kind}, got {type(reparameterizer).__name__}")
    if not isinstance(reparameterizer, Reparameterizer):
        raise BrazeError(f"apply_reparameterization: expected a Reparameterizer (such as braze.nn.Lora), got "
                         f"{type(reparameterizer).__name__}")
    offered = []
    for path, p, owner in structural_params(module):
        if p._reparam is not None:
            raise BrazeError(f"apply_reparameterization: {path or 'the parameter'} already has a "
                             f"{type(p._reparam).__name__}; nested reparameterizations are not supported "
                             f"(materialize() the module first)")
        if p.lazy_dtype.is_float:
            offered.append((path, p, owner))
    reparameterizer.validate(offered)
    for path, p, owner in offered:
        state = reparameterizer.reparameterize(path, p, owner)
        if state is None:
            continue
        if not isinstance(state, Reparameterization):
            raise BrazeError(f"{type(reparameterizer).__name__}.reparameterize returned {type(state).__name__} for "
                             f"{path}; expected a Reparameterization or None")
        for _, q in state.named_params():
            q._set_autodiff(p._autodiff_enabled())  # nested values join the parameter's autodiff context
        p._reparam = state
    return module


def store_quantized(param: Param, packed: QuantizedTensor) -> None:
    """Make `packed` the stored base of `param` (its dense value and gradient are dropped; id, configured
    trainability, mapper and any reparameterization are kept)."""
    autodiff = param._autodiff_enabled()
    if param._lazy is not None:
        param._lazy.holders.discard(param)
    param._value, param._lazy, param._autodiff = None, None, autodiff
    param._packed = packed.in_context(autodiff)


def quantize_weights(module: Module | Param, quantizer: Quantizer, group: ParamGroup | None = None) -> Any:
    """Quantize the weights (floating-point parameters of rank >= 2; not biases, norms, buffers or adapter
    factors) that `group` matches (all without a group); an already quantized weight is requantized."""
    from .quant import Quantizer
    if not isinstance(quantizer, Quantizer):
        raise BrazeError(f"quantize_weights: expected a braze.nn.Quantizer, got {type(quantizer).__name__}")
    for path, p, _ in list(structural_params(module)):
        if is_weight(p) and (group is None or group.matches(path, p)):
            store_quantized(p, quantizer.quantize(p.base()))
    return module


def is_weight(param: Param) -> bool:
    """A floating-point parameter (not a buffer) of rank >= 2: what quantization applies to."""
    return param.lazy_dtype.is_float and not param.is_buffer and len(param.lazy_shape) >= 2


def materialize(module: Module | Param) -> Any:
    """Fold every reparameterization (and quantized base) into a plain dense value, in place."""
    for _, p, _ in list(structural_params(module)):
        materialize_param(p)
    return module


def materialize_param(param: Param) -> None:
    """Replace a reparameterized or quantized parameter's storage by its effective value, detached: a new leaf
    in the same autodiff context, keeping id, mapper and configured trainability. Others are left lazy."""
    if param._reparam is None and param._packed is None:
        return
    with no_grad():
        value = param.val()
    autodiff, device = param._autodiff_enabled(), param.lazy_device
    param._reparam = None
    param._set_value(Tensor._wrap(np.array(value._data, copy=True), autodiff, device))


__all__ = ["Reparameterization", "Reparameterizer", "apply_reparameterization", "materialize", "own_entries",
           "map_param", "quantize_weights", "store_quantized"]
