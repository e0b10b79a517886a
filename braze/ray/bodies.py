"""HTTP bodies of the Serve deployment: a request's body as input columns, output columns as a response body.

JSON (content type application/json, or none given): `{"inputs": {"x": [[...], ...]}}`, one nested list per input
holding its rows; numbers convert to the input's dtype when they fit it exactly in kind and range (integers or
floats for a float input, integers for an integer input, true/false for a bool input). The answer is
`{"outputs": {"y": [[...], ...]}}`; a non-finite output is written as NaN, Infinity or -Infinity, as Python's json
module reads and writes them.

safetensors (content type application/safetensors, application/x-safetensors or application/octet-stream): one
tensor per input, named as the input, rows on axis 0; the answer is one tensor per output in the same format.

A body is untrusted: anything wrong with it is a RequestError carrying the HTTP status to answer with and a
message naming the problem (400 a body that does not parse, 413 one over the size limit, 415 another content
type, 422 inputs that parse but do not fit the artifact: a wrong or missing name, shape or dtype, an index out of
range).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from braze.frontend.read_limits import load_json
from braze.frontend.safetensors_io import decode, encode
from braze.ir.errors import BrazeError, RecordError

from .rows import Column, Rows

JSON_TYPE = "application/json"
SAFETENSORS_TYPES = ("application/safetensors", "application/x-safetensors", "application/octet-stream")
# a column's dtype kind -> the kinds of the arrays numpy makes of the JSON values it takes, and what they are
_JSON_VALUES = {"f": ("fiu", "numbers"), "i": ("iu", "integers"), "u": ("iu", "integers"), "b": ("b", "true or false")}


class RequestError(BrazeError):
    """A request the deployment refuses: the HTTP status to answer with (4xx) and the message."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def media_type(content_type: str | None) -> str:
    """The body's media type from a Content-Type header (JSON when there is none); 415 for an unsupported one."""
    media = (content_type or JSON_TYPE).split(";")[0].strip().lower()
    if media != JSON_TYPE and media not in SAFETENSORS_TYPES:
        raise RequestError(f"unsupported content type {media!r}; send {JSON_TYPE} or one of "
                           f"{', '.join(SAFETENSORS_TYPES)} (safetensors)", 415)
    return media


def parse(body: bytes, media: str, rows: Rows, limit: int) -> tuple[dict[str, np.ndarray], int]:
    """The input columns of a request body of a media type from media_type, and their number of rows."""
    if len(body) > limit:
        raise RequestError(f"the request body is {len(body)} bytes, more than the limit of {limit} bytes", 413)
    columns = _json_inputs(body) if media == JSON_TYPE else _safetensors_columns(body)
    unknown = sorted(set(columns) - {c.name for c in rows.inputs})
    if unknown:
        wanted = ", ".join(c.describe() for c in rows.inputs)
        raise RequestError(f"request: unknown input(s) {', '.join(map(repr, unknown))}; the artifact's inputs are "
                           f"{wanted}", 422)
    if media == JSON_TYPE:
        columns = {c.name: _json_array(c, columns[c.name]) for c in rows.inputs if c.name in columns}
    try:
        count = rows.check(columns, "request")
    except BrazeError as err:
        raise RequestError(str(err), 422) from None
    if count == 0:
        raise RequestError("request: the inputs have no rows; send at least one", 422)
    return columns, count


def answer(outputs: Mapping[str, np.ndarray], media: str) -> bytes:
    """The response body of one request's output columns, in the request's format."""
    if media == JSON_TYPE:
        return json.dumps({"outputs": {name: array.tolist() for name, array in outputs.items()}}).encode()
    return encode(outputs, {})


def error_body(message: str) -> bytes:
    """The JSON body of a refused request: `{"error": message}`."""
    return json.dumps({"error": message}).encode()


def _json_inputs(body: bytes) -> dict[str, Any]:
    """The "inputs" object of a JSON body: input names to nested lists, not yet converted."""
    try:
        document = load_json(body.decode("utf-8"), "request body")
    except UnicodeDecodeError:
        raise RequestError("request body: not UTF-8 text, so not JSON (send safetensors with content type "
                           "application/safetensors)", 400) from None
    except RecordError as err:
        raise RequestError(str(err), 400) from None
    inputs = document.get("inputs") if isinstance(document, dict) else None
    if not isinstance(inputs, dict):
        raise RequestError('request body: expected a JSON object {"inputs": {"<input name>": [rows...]}}', 400)
    return inputs


def _json_array(column: Column, value: Any) -> np.ndarray:
    """Nested lists as an array of the column's dtype, refusing values of another kind or out of its range."""
    try:
        array = np.array(value)
    except (ValueError, OverflowError) as err:
        raise RequestError(f"request: input {column.describe()}: the nested lists do not form an array ({err})",
                           400) from None
    kinds, wanted = _JSON_VALUES[column.dtype.kind]
    info = np.iinfo(column.dtype) if column.dtype.kind in "iu" else None
    if array.size and (array.dtype.kind not in kinds or (info and (array.min() < info.min or array.max() > info.max))):
        bounds = f" in [{info.min}, {info.max}]" if info else ""
        raise RequestError(f"request: input {column.describe()}: expected JSON {wanted}{bounds}; got values numpy "
                           f"reads as {array.dtype}", 422)
    with np.errstate(over="ignore"):
        converted = array.astype(column.dtype)
    if column.dtype.kind == "f" and not np.isfinite(converted).all():
        raise RequestError(f"request: input {column.describe()}: a value is too large for {column.dtype.name}", 422)
    return converted


def _safetensors_columns(body: bytes) -> dict[str, np.ndarray]:
    try:
        tensors, _ = decode(body, "request body")
    except RecordError as err:
        raise RequestError(str(err), 400) from None
    return tensors
