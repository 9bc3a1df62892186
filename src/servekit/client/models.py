"""A server's `/v1/models` reply read strictly (core): entries, the served names and each
entry's max_model_len, and what makes a reply malformed (the server's fault, not the model's).
bench and validate read it the same way."""

from __future__ import annotations

from typing import Any


def model_entries(doc: object) -> list[dict[str, Any]]:
    """The reply's `data` entries that are objects with an `id` ([] for any other shape)."""
    data = doc.get("data") if isinstance(doc, dict) else None
    return [d for d in data if isinstance(d, dict) and "id" in d] if isinstance(data, list) else []


def malformed_models(entries: list[dict[str, Any]]) -> str | None:
    """What is wrong with /v1/models entries (an id that is no string, a max_model_len that
    is no positive integer), or None."""
    for index, entry in enumerate(entries):
        if not isinstance(entry["id"], str) or not entry["id"]:
            return f"data[{index}].id is {_short(entry['id'])}, not a model name"
        length = entry.get("max_model_len")
        if length is not None and model_len(entry) is None:
            return f"data[{index}].max_model_len is {_short(length)}, not a positive integer"
    return None


def model_len(entry: dict[str, Any]) -> int | None:
    """An entry's max_model_len when it is a positive integer (not a bool), else None."""
    length = entry.get("max_model_len")
    if isinstance(length, int) and not isinstance(length, bool) and length > 0:
        return length
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
