"""The server's structured-output fields, as the engine's `StructuredOutputsParams`: OpenAI's `response_format`
(`{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}`, `{"type": "json_object"}` or
`{"type": "text"}`) and vLLM's `structured_outputs` (its fields: json, regex, choice, grammar, json_object).
course/serve.py calls `constraint_from_request` on each request; a constraint that cannot be used is a
`ConstraintError` naming the field, which the server answers with a 400."""

from __future__ import annotations

import dataclasses
from typing import Any

from framework.sampling import StructuredOutputsParams
from framework.structured_output import constraint_key

FIELDS = tuple(f.name for f in dataclasses.fields(StructuredOutputsParams))
REQUEST_FIELDS = ("response_format", "structured_outputs")  # the request's fields read here


class ConstraintError(ValueError):
    """A structured-output field that cannot be used: what is wrong (the message) and which field (`param`)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def constraint_from_request(extra: dict[str, Any]) -> StructuredOutputsParams | None:
    """The constraint that `response_format` or `structured_outputs` of `extra` (the request's fields the server's
    model does not name) asks for, checked (a JSON schema against its metaschema); None for none."""
    response_format, fields = extra.get("response_format"), extra.get("structured_outputs")
    if response_format is not None and fields is not None:
        raise ConstraintError("give response_format or structured_outputs, not both", "response_format")
    if fields is not None:
        constraint = _from_fields(fields)
    elif response_format is not None:
        constraint = _from_response_format(response_format)
    else:
        return None
    if constraint is not None:
        try:
            constraint_key(constraint)
        except ValueError as error:
            raise as_request_error(error, extra) from None
    return constraint


def as_request_error(error: ValueError, extra: dict[str, Any]) -> ConstraintError:
    """The framework's error about a constraint, named as the request gave it (response_format or
    structured_outputs)."""
    param = "response_format" if extra.get("response_format") is not None else "structured_outputs"
    return ConstraintError(str(error).replace("structured_outputs.json", param), param)


def _from_fields(fields: Any) -> StructuredOutputsParams:
    if not isinstance(fields, dict):
        raise ConstraintError(f"structured_outputs must be an object with one of {', '.join(FIELDS)}",
                              "structured_outputs")
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ConstraintError(f"structured_outputs.{unknown[0]} is not supported: give one of {', '.join(FIELDS)}",
                              "structured_outputs")
    try:
        return StructuredOutputsParams(**fields)
    except ValueError as error:
        raise ConstraintError(str(error), "structured_outputs") from None


def _from_response_format(response_format: Any) -> StructuredOutputsParams | None:
    if not isinstance(response_format, dict):
        raise ConstraintError(f'response_format must be an object such as {{"type": "json_object"}}, got '
                              f"{str(response_format)[:60]!r}", "response_format")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind != "json_schema":
        raise ConstraintError(f"response_format.type must be 'json_schema', 'json_object' or 'text', got {kind!r}",
                              "response_format")
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise ConstraintError("response_format.json_schema must be an object with the schema under 'schema', e.g. "
                              '{"name": "person", "schema": {"type": "object", ...}}', "response_format")
    return StructuredOutputsParams(json=schema)
