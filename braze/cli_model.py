"""What the `braze` commands share: building a model from FILE.py:FACTORY, its random inputs, the user's own
exceptions shown as the user's traceback, atomic output files and progress on a terminal."""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
import traceback
from typing import Any, Callable, Iterator, Sequence

from braze.ir.errors import BrazeError

_OUR_PACKAGES = ("braze", "braze.ir", "braze.frontend", "braze.codegen", "braze.runtime")


class UserCodeError(BrazeError):
    """An exception raised by the user's own code (the model file, its factory or its forward); carries the
    traceback of the user's frames only."""

    def __init__(self, message: str, user_traceback: str) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


def run_user_code(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs); a non-braze exception from it becomes a UserCodeError showing the user's frames."""
    try:
        return fn(*args, **kwargs)
    except BrazeError:
        raise
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_user_frame(f.filename)]
        shown = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
        shown += "".join(traceback.format_exception_only(type(exc), exc))
        raise UserCodeError(f"{what} raised {type(exc).__name__}: {exc}", shown) from exc


def _is_user_frame(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not filename.startswith("<frozen") and not any(path.startswith(d) for d in _our_dirs())


def _our_dirs() -> tuple[str, ...]:
    """The folders of braze's own code: the facade and the four components."""
    return tuple(os.path.dirname(os.path.abspath(sys.modules[name].__file__)) + os.sep for name in _OUR_PACKAGES
                 if getattr(sys.modules.get(name), "__file__", None))


def load_factory(spec: str) -> Callable[[], Any]:
    """FACTORY from FILE.py in `FILE.py:FACTORY`; the file runs as a fresh module with its folder importable."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise BrazeError(f"expected FILE.py:FACTORY (a Python file and a function in it), got {spec!r}")
    if not os.path.isfile(path):
        raise BrazeError(f"no such file: {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = "_braze_dump_" + "".join(c if c.isalnum() else "_" for c in stem)
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise BrazeError(f"cannot load {path} as Python source")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        run_user_code(path, module_spec.loader.exec_module, module)
    except UserCodeError as err:
        if isinstance(err.__cause__, SyntaxError):
            syntax = err.__cause__
            raise BrazeError(f"{syntax.filename or path}:{syntax.lineno}: syntax error: {syntax.msg}") from None
        raise
    finally:
        sys.path.pop(0)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise BrazeError(f"{path} defines no function {name!r}")
    return factory


def build_model(spec: str, seed: int) -> Any:
    """The braze.nn.Module that FACTORY() in `FILE.py:FACTORY` returns, built with the given seed."""
    import braze
    factory = load_factory(spec)
    braze.manual_seed(seed)  # initialization and dropout seeds repeat from run to run
    model = run_user_code(spec, factory)
    if not isinstance(model, braze.nn.Module):
        raise BrazeError(f"{spec} returned a {type(model).__name__}, not a braze.nn.Module")
    return model


def check_arity(spec: str, model: Any, count: int) -> None:
    """One --input per argument of the model's forward (BrazeError naming the arguments otherwise)."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):  # a forward without an inspectable signature is called as given
        return
    try:
        signature.bind(*range(count))
    except TypeError:
        names = [p.name for p in signature.parameters.values()]
        raise BrazeError(f"{spec}: forward{signature} takes {len(names)} input(s) ({', '.join(names) or 'none'}); "
                         f"got {count} --input shape(s)") from None


def parse_shape(text: str) -> tuple[int, ...]:
    """`1x3x32x32` -> (1, 3, 32, 32); `scalar` (or an empty string) is a rank-0 input."""
    if text in ("", "scalar"):
        return ()
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape like 1x3x32x32, got {text!r}") from None
    if any(d < 0 for d in dims):
        raise argparse.ArgumentTypeError(f"dimensions must be non-negative, got {text!r}")
    return dims


def random_input(shape: tuple[int, ...], dtype: str, rng: Any) -> Any:
    """Example data: standard normal floats, 0/1 integers (valid class or token indices), random bools."""
    import numpy as np
    d = np.dtype(dtype)
    if d.kind == "f":
        return rng.standard_normal(shape).astype(d)
    if d.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 2, shape).astype(d)


def random_inputs(shapes: Sequence[tuple[int, ...]], dtype: str, seed: int) -> list[Any]:
    """One random numpy array per shape (see random_input), repeatable with the seed."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return [random_input(shape, dtype, rng) for shape in shapes]


def write_output(data: bytes | str, path: str | None) -> None:
    """Standard output, or the file `path` written whole (a temporary file renamed into place)."""
    if not path:
        sys.stdout.write(data if isinstance(data, str) else data.decode())
        return
    from braze.frontend.atomic_files import write_atomic
    write_atomic(path, data.encode("utf-8") if isinstance(data, str) else data)


class Progress:
    """The named steps of a long command, as a tqdm bar on a terminal; silent when stderr is not a terminal or
    tqdm (the optional extra `cli`) is not installed."""

    def __init__(self, total: int, desc: str) -> None:
        self._bar, self._started = None, False
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr, unit="step")

    def step(self, label: str) -> None:
        """Start the step `label` (the previous one is done)."""
        if self._bar is not None:
            if self._started:
                self._bar.update(1)
            self._bar.set_postfix_str(label)
            self._started = True

    def iterate(self, items: Sequence[Any] | range, desc: str) -> Iterator[Any]:
        """The items, with a bar of their own on a terminal."""
        if self._bar is None:
            yield from items
            return
        from tqdm import tqdm
        yield from tqdm(items, desc=desc, leave=False, file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
