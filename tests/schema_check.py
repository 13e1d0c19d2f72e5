"""A small checker for the subset of JSON Schema that dashboard/openapi.json uses: $ref, type
(a name or a list of names, "null" included), nullable (OpenAPI 3.0), enum, required,
properties, additionalProperties (false or a schema), items, oneOf. Returns every violation, each
with its JSON path, so a failing test says where the document and the view disagree."""
from __future__ import annotations

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_KNOWN = {"$ref", "type", "nullable", "enum", "required", "properties", "additionalProperties", "items",
          "description", "format", "minimum", "maximum", "default", "oneOf"}


def resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local $refs are supported, not {ref}")
        node = document
        for part in ref[2:].split("/"):
            node = node[part]
        schema = node
    return schema


def violations(document: dict, schema: dict, value, path: str = "$") -> list[str]:
    schema = resolve(document, schema)
    unsupported = set(schema) - _KNOWN
    if unsupported:
        # A keyword we do not check would pass silently: refuse instead.
        raise ValueError(f"{path}: unsupported schema keyword(s) {sorted(unsupported)}")
    problems: list[str] = []
    if "oneOf" in schema:
        matching = [branch for branch in schema["oneOf"] if not violations(document, branch, value, path)]
        if len(matching) != 1:
            problems.append(f"{path}: {value!r:.80} matches {len(matching)} of the oneOf schemas, not exactly one")
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else list(types)
        if schema.get("nullable"):
            types.append("null")
        if not any(_TYPES[t](value) for t in types):
            return [f"{path}: {value!r:.80} is not of type {types}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r:.80} is not one of {schema['enum']}")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{path}: required property {name!r} is missing")
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                problems += violations(document, properties[name], item, f"{path}.{name}")
            elif extra is False:
                problems.append(f"{path}: property {name!r} is not in the schema")
            elif isinstance(extra, dict):
                problems += violations(document, extra, item, f"{path}.{name}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += violations(document, schema["items"], item, f"{path}[{i}]")
    return problems
