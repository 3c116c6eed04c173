"""The requests' inputs: the built-in recipe (one BYTES prompt + one INT32 length), ``--inputs`` JSON,
and tritonclient ``InferInput`` s typed from the model config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from replay.errors import UserError

#: The prompt of the built-in recipe.
DEFAULT_PROMPT = "check-cancel"

_NP_TYPES = {
    "BOOL": "bool", "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "FP16": "float16", "FP32": "float32", "FP64": "float64",
}  # fmt: skip


def _dtype_name(config_type: str) -> str:
    t = config_type.removeprefix("TYPE_")
    return "BYTES" if t == "STRING" else t


def recipe(config: Any, length: int) -> dict[str, Any]:
    """Built-in inputs for a model with one BYTES prompt and one INT32 length among its required inputs."""
    required = [i for i in config.input if not i.optional]
    strings = [i for i in required if _dtype_name(model_type_name(i.data_type)) == "BYTES"]
    ints = [i for i in required if _dtype_name(model_type_name(i.data_type)) == "INT32"]
    others = [i.name for i in required if i not in strings and i not in ints]
    if len(strings) != 1 or len(ints) != 1 or others:
        names = ", ".join(f"{i.name} ({_dtype_name(model_type_name(i.data_type))})" for i in required)
        raise UserError(
            f"model {config.name!r} needs inputs the built-in recipe (one BYTES prompt + one INT32 length) "
            f"cannot build: {names or 'none'}; give --inputs JSON"
        )
    return {strings[0].name: [DEFAULT_PROMPT], ints[0].name: [length]}


def model_type_name(value: int) -> str:
    """``TYPE_INT32`` etc. for a model_config DataType value."""
    from tritonclient.grpc import model_config_pb2

    name: str = model_config_pb2.DataType.Name(value)
    return name


def build_inputs(config: Any, values: dict[str, Any]) -> list[Any]:
    """tritonclient InferInputs from ``{name: nested list}``, typed from the model config."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    by_name = {i.name: i for i in config.input}
    out = []
    for name, value in values.items():
        spec = by_name.get(name)
        if spec is None:
            raise UserError(f"--inputs: model {config.name!r} has no input {name!r} (it has {', '.join(by_name)})")
        dtype = _dtype_name(model_type_name(spec.data_type))
        try:
            if dtype == "BYTES":
                arr = np.array(value, dtype=np.object_)
                arr = np.vectorize(lambda x: x.encode() if isinstance(x, str) else x, otypes=[np.object_])(arr)
            else:
                arr = np.array(value, dtype=_NP_TYPES[dtype])
        except (KeyError, ValueError, TypeError) as e:
            raise UserError(f"--inputs: value of {name!r} is not a {dtype} array: {e}") from None
        t = grpcclient.InferInput(name, list(arr.shape), dtype)
        t.set_data_from_numpy(arr)
        out.append(t)
    missing = [i.name for i in config.input if not i.optional and i.name not in values]
    if missing:
        raise UserError(f"--inputs: model {config.name!r} also needs {', '.join(missing)}")
    return out


def parse_json_inputs(text: str, flag: str) -> dict[str, Any]:
    """``--inputs`` / ``--probe-inputs``: a JSON object ``{name: array}`` (or @FILE)."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as e:
            raise UserError(f"{flag}: cannot read {text[1:]!r}: {e.strerror or e}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{flag}: not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise UserError(f"{flag}: must be a JSON object {{input name: array}}")
    return value
