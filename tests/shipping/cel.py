"""A ValidatingAdmissionPolicy evaluated as the API server does, with a CEL evaluator (cel-python):
its matchConditions, then its variables in order, then each validation. Only what our policies use
(no optional types, no params, no authorizer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import celpy

Obj = dict[str, Any]


@dataclass(frozen=True)
class Verdict:
    matched: bool
    denied: tuple[str, ...]  # the messages of the validations that failed


def _run(env: celpy.Environment, expression: str, activation: dict[str, Any]) -> Any:
    program = env.program(env.compile(expression))
    result = program.evaluate(activation)
    if isinstance(result, celpy.celtypes.BoolType | bool):
        return bool(result)
    return result


def evaluate(
    policy: Obj, obj: Obj | None, old: Obj | None, *, username: str, operation: str, sub_resource: str = ""
) -> Verdict:
    env = celpy.Environment()
    request = {"userInfo": {"username": username}, "operation": operation, "subResource": sub_resource}
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(request),
    }
    spec = policy["spec"]
    for condition in spec.get("matchConditions", []):
        if not _run(env, condition["expression"], activation):
            return Verdict(False, ())
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celpy.celtypes.MapType(variables)
        value = env.program(env.compile(variable["expression"])).evaluate(activation)
        variables[celpy.celtypes.StringType(variable["name"])] = value
    activation["variables"] = celpy.celtypes.MapType(variables)
    denied = []
    for validation in spec["validations"]:
        result = env.program(env.compile(validation["expression"])).evaluate(activation)
        if isinstance(result, celpy.CELEvalError):
            raise AssertionError(f"{validation['expression']}: {result}")
        if not bool(result):
            denied.append(validation["message"])
    return Verdict(True, tuple(denied))
