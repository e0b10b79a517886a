"""Request bodies of the Serve deployment, JSON and safetensors, read into input columns and answered in kind; every
bad body a RequestError with a 4xx status and a message naming the problem (no Ray needed)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from braze.frontend.safetensors_io import decode, encode
from braze.ray.bodies import JSON_TYPE, RequestError, answer, media_type, parse
from braze.ray.rows import Column, Rows

ROWS = Rows(4, (Column("ids", np.dtype(np.int64), (3,)), Column("scale", np.dtype(np.float32), (1,))),
            (Column("y", np.dtype(np.float32), (2,)),))
LIMIT = 1 << 20


def json_body(inputs: object) -> bytes:
    return json.dumps({"inputs": inputs}).encode()


def refused(body: bytes, media: str = JSON_TYPE) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse(body, media, ROWS, LIMIT)
    return caught.value


def test_parse_json_converts_rows_to_the_input_dtypes() -> None:
    columns, count = parse(json_body({"ids": [[0, 1, 2], [3, 4, 5]], "scale": [[1], [0.5]]}), JSON_TYPE, ROWS, LIMIT)
    assert count == 2
    assert columns["ids"].dtype == np.int64 and columns["ids"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert columns["scale"].dtype == np.float32 and columns["scale"].tolist() == [[1.0], [0.5]]


def test_parse_safetensors_reads_one_tensor_per_input() -> None:
    ids, scale = np.arange(6).reshape(2, 3), np.ones((2, 1), np.float32)
    columns, count = parse(encode({"ids": ids, "scale": scale}, {}), "application/safetensors", ROWS, LIMIT)
    assert count == 2 and np.array_equal(columns["ids"], ids) and np.array_equal(columns["scale"], scale)


@pytest.mark.parametrize("body, status, message", [
    (b"{not json", 400, r"request body: not valid JSON"),
    (b"\xff\xfe", 400, r"not UTF-8 text"),
    (b'{"rows": []}', 400, r'expected a JSON object \{"inputs"'),
    (json_body({"ids": [[0, 1, 2], [3, 4]], "scale": [[1], [1]]}), 400, r"'ids'.*nested lists do not form an array"),
    (json_body({"ids": [[0, 1, 2]], "scale": [[1]], "bias": [[0]]}), 422, r"unknown input\(s\) 'bias'"),
    (json_body({"ids": [[0, 1, 2]]}), 422, r"no column 'scale'"),
    (json_body({"ids": [[0, 1]], "scale": [[1]]}), 422, r"'ids' \(rows of int64\[3\]\) got rows of shape \[2\]"),
    (json_body({"ids": [[0.5, 1, 2]], "scale": [[1]]}), 422, r"'ids' \(rows of int64\[3\]\): expected JSON integers "
                                                            r"in \[-9223372036854775808, 9223372036854775807\]; got "
                                                            r"values numpy reads as float64"),
    (json_body({"ids": [[0, 1, 2]], "scale": [["a"]]}), 422, r"'scale'.*expected JSON numbers; got values numpy "
                                                            r"reads as <U1"),
    (json_body({"ids": [[0, 1, 2]], "scale": [[1e39]]}), 422, r"'scale'.*too large for float32"),
    (json_body({"ids": [[2 ** 63]], "scale": [[1]]}), 422, r"'ids'.*expected JSON integers .*reads as uint64"),
    (json_body({"ids": [[2 ** 63, 1, 2]], "scale": [[1]]}), 422, r"'ids'.*expected JSON integers .*reads as float64"),
    (json_body({"ids": [[2 ** 64, 1, 2]], "scale": [[1]]}), 422, r"'ids'.*expected JSON integers .*reads as object"),
    (json_body({"ids": [], "scale": []}), 422, r"got rows of shape \[\]"),
])
def test_parse_refuses_a_bad_json_body(body: bytes, status: int, message: str) -> None:
    error = refused(body)
    assert error.status == status
    assert pytest.raises(RequestError, parse, body, JSON_TYPE, ROWS, LIMIT).match(message)


def test_parse_refuses_a_safetensors_tensor_of_an_unsafe_dtype() -> None:
    body = encode({"ids": np.zeros((1, 3), np.int64), "scale": np.ones((1, 1), np.float64)}, {})
    error = refused(body, "application/safetensors")
    assert error.status == 422 and "'scale' (rows of float32[1]) got dtype float64" in str(error)


def test_parse_refuses_a_damaged_safetensors_body() -> None:
    error = refused(b"\x08\x00\x00\x00\x00\x00\x00\x00{}", "application/octet-stream")
    assert error.status == 400 and str(error).startswith("request body:")


def test_parse_refuses_a_body_over_the_limit() -> None:
    with pytest.raises(RequestError, match=r"request body is 101 bytes, more than the limit of 100") as caught:
        parse(b" " * 101, JSON_TYPE, ROWS, 100)
    assert caught.value.status == 413


def test_parse_refuses_a_request_without_rows() -> None:
    body = encode({"ids": np.zeros((0, 3), np.int64), "scale": np.zeros((0, 1), np.float32)}, {})
    error = refused(body, "application/safetensors")
    assert error.status == 422 and "no rows" in str(error)


def test_media_type_reads_the_header_and_refuses_others() -> None:
    assert media_type("application/json; charset=utf-8") == JSON_TYPE and media_type(None) == JSON_TYPE
    assert media_type("Application/X-Safetensors") == "application/x-safetensors"
    with pytest.raises(RequestError, match=r"unsupported content type 'text/csv'") as caught:
        media_type("text/csv")
    assert caught.value.status == 415


def test_answer_round_trips_float32_outputs_exactly() -> None:
    y = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    as_json = json.loads(answer({"y": y}, JSON_TYPE))["outputs"]["y"]
    assert np.array_equal(np.asarray(as_json, np.float32), y)
    tensors, _ = decode(answer({"y": y}, "application/safetensors"), "response")
    assert np.array_equal(tensors["y"], y)
