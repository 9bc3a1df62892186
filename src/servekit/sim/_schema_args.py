"""Tool-call arguments that satisfy a JSON schema (core), drawn from a given RNG.

Covers what function schemas use: objects with required and optional properties, strings
(enum, const, length limits, a few formats), numbers and integers within minimum/maximum
(exclusive bounds and multipleOf too), booleans, null, arrays with item schemas and length
limits, anyOf/oneOf (first usable branch), allOf (merged objects) and local `$ref`s. A
malformed schema never raises: whatever cannot be read falls back to a short string.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

JsonValue = dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None

_MAX_DEPTH = 8
_WORDS = ("alpha", "bravo", "delta", "river", "stone", "cloud", "amber", "north", "maple")


def arguments_for(
    schema: Mapping[str, object], rng: random.Random, *, cities: Sequence[str] = ("Paris",)
) -> JsonValue:
    """Return a value that validates against a JSON schema.

    Args:
        schema: the tool's `parameters` schema (normally an object schema).
        rng: randomness; the same RNG state gives the same value.
        cities: names used for string properties called like a place.
    """
    return _value(schema, schema, rng, "", 0, cities)


def _value(
    schema: object,
    root: Mapping[str, object],
    rng: random.Random,
    name: str,
    depth: int,
    cities: Sequence[str],
) -> JsonValue:
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return "value"
    schema = _resolve(schema, root)
    if "const" in schema:
        return _json(schema["const"])
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return _json(rng.choice(enum))
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if isinstance(o, Mapping) and o.get("type") != "null"]
            return _value((usable or options)[0], root, rng, name, depth + 1, cities)
    merged = _merge_all_of(schema, root)
    kind = _type_of(merged)
    if kind == "object":
        return _object(merged, root, rng, depth, cities)
    if kind == "array":
        return _array(merged, root, rng, name, depth, cities)
    if kind in ("integer", "number"):
        return _number(merged, rng, integer=kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(merged, rng, name, cities)


def _resolve(schema: Mapping[str, object], root: Mapping[str, object]) -> Mapping[str, object]:
    for _ in range(_MAX_DEPTH):
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        node: object = root
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            return {}
        schema = node
    return schema


def _merge_all_of(schema: Mapping[str, object], root: Mapping[str, object]) -> dict[str, object]:
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return merged
    properties = dict(_mapping(merged.get("properties")))
    required = list(_strings(merged.get("required")))
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        part = _resolve(part, root)
        properties.update(_mapping(part.get("properties")))
        required += _strings(part.get("required"))
        for key, value in part.items():
            if key not in ("properties", "required"):
                merged.setdefault(key, value)
    if properties:
        merged["properties"] = properties
        merged.setdefault("type", "object")
    if required:
        merged["required"] = required
    return merged


def _type_of(schema: Mapping[str, object]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _object(
    schema: Mapping[str, object],
    root: Mapping[str, object],
    rng: random.Random,
    depth: int,
    cities: Sequence[str],
) -> JsonValue:
    properties = _mapping(schema.get("properties"))
    required = set(_strings(schema.get("required")))
    out: dict[str, JsonValue] = {}
    for key, sub in properties.items():
        if key in required or rng.random() < 0.5:
            out[key] = _value(sub, root, rng, key, depth + 1, cities)
    for key in sorted(required - set(properties)):
        out[key] = "value"  # required but undescribed: any value validates
    return out


def _array(
    schema: Mapping[str, object],
    root: Mapping[str, object],
    rng: random.Random,
    name: str,
    depth: int,
    cities: Sequence[str],
) -> JsonValue:
    low = _int(schema.get("minItems"), 1)
    high = max(low, _int(schema.get("maxItems"), max(low, 3)))
    count = rng.randint(low, min(high, low + 3))
    items = schema.get("items", {})
    out: list[JsonValue] = []
    for _ in range(count * 4):
        if len(out) == count:
            break
        value = _value(items, root, rng, name, depth + 1, cities)
        if schema.get("uniqueItems") is True and value in out:
            continue
        out.append(value)
    if len(out) < low and isinstance(items, Mapping) and isinstance(items.get("enum"), list):
        # unique draws from a small enum can repeat past the tries (2 of 3 values: about 1
        # in 2,000): fill up from the values not drawn, in order, to reach minItems
        out += [v for v in items["enum"] if v not in out][: low - len(out)]
    return out


def _number(schema: Mapping[str, object], rng: random.Random, *, integer: bool) -> int | float:
    low = _float(schema.get("minimum"))
    high = _float(schema.get("maximum"))
    ex_low = _float(schema.get("exclusiveMinimum"))
    ex_high = _float(schema.get("exclusiveMaximum"))
    step = _float(schema.get("multipleOf"))
    if integer:
        los = [math.ceil(v) for v in (low,) if v is not None]
        los += [math.floor(v) + 1 for v in (ex_low,) if v is not None]
        his = [math.floor(v) for v in (high,) if v is not None]
        his += [math.ceil(v) - 1 for v in (ex_high,) if v is not None]
        a, b = _window(max(los) if los else None, min(his) if his else None, 0, 100)
        if step and step == int(step) and step > 0:
            multiples = range(math.ceil(a / step), math.floor(b / step) + 1)
            if multiples:
                return int(rng.choice(multiples) * step)
        return rng.randint(math.ceil(a), math.floor(b))
    lows = [v for v in (low, None if ex_low is None else ex_low + 0.01) if v is not None]
    highs = [v for v in (high, None if ex_high is None else ex_high - 0.01) if v is not None]
    a, b = _window(max(lows) if lows else None, min(highs) if highs else None, 0.0, 100.0)
    if step and step > 0:
        multiples = range(math.ceil(a / step), math.floor(b / step) + 1)
        if multiples:
            return rng.choice(multiples) * step
    value = round(rng.uniform(a, b), 2)
    return min(max(value, a), b)


def _window(lo: float | None, hi: float | None, d_lo: float, d_hi: float) -> tuple[float, float]:
    if lo is None and hi is None:
        return d_lo, d_hi
    if lo is None:
        assert hi is not None
        return min(d_lo, hi - (d_hi - d_lo)), hi
    if hi is None:
        return lo, max(d_hi, lo + (d_hi - d_lo))
    return (lo, hi) if lo <= hi else (lo, lo)


def _string(
    schema: Mapping[str, object], rng: random.Random, name: str, cities: Sequence[str]
) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        text = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    elif fmt == "date-time":
        text = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:00:00Z"
    elif fmt == "email":
        text = f"{rng.choice(_WORDS)}@example.com"
    elif fmt in ("uri", "url"):
        text = f"https://example.com/{rng.choice(_WORDS)}"
    elif any(part in name.lower() for part in ("city", "location", "place", "town")):
        text = rng.choice(cities)
    else:
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3)))
    low = _int(schema.get("minLength"), 0)
    high = _int(schema.get("maxLength"), max(len(text), low))
    while len(text) < low:
        text += rng.choice("abcdefghij")
    return text[: max(high, low)]


def _mapping(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return default
    return value


def _json(value: object) -> JsonValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return str(value)
