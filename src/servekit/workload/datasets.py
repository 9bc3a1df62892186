"""Prompt datasets and length distributions (core): parse text, return prompts.

- JSONL: one JSON object per line with `prompt` (text) or `messages` (chat), and optionally
  `output_len` / `max_tokens`.
- ShareGPT: a JSON list of `{"conversations": [{"from": "human"|"gpt", "value": ...}]}`;
  the first human turn is the prompt, the following gpt turn's word count the output length.
- Lengths: `N` (fixed), `N:uniform` (uniform in [N/2, 3N/2]) or `N:normal:SD`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from servekit import jsontext
from servekit.errors import UsageError


@dataclass(frozen=True, slots=True)
class PromptItem:
    """One prompt from a dataset: text or chat messages, and an output length if it has one."""

    prompt: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    output_len: int | None = None


@dataclass(frozen=True, slots=True)
class LengthSpec:
    """A length distribution."""

    mean: int
    kind: str = "fixed"
    sd: float = 0.0

    def draw(self, rng: random.Random) -> int:
        """One length (at least 1)."""
        if self.kind == "uniform":
            return max(1, rng.randint(self.mean // 2, self.mean * 3 // 2))
        if self.kind == "normal":
            return max(1, round(rng.gauss(self.mean, self.sd)))
        return self.mean


def parse_length(text: str, flag: str) -> LengthSpec:
    """Parse `N`, `N:uniform` or `N:normal:SD`.

    Raises:
        UsageError: anything else, naming the flag and the accepted forms.
    """
    parts = text.split(":")
    try:
        mean = int(parts[0])
        if mean <= 0:
            raise ValueError
        if len(parts) == 1:
            return LengthSpec(mean)
        if parts[1] == "uniform" and len(parts) == 2:
            return LengthSpec(mean, "uniform")
        if parts[1] == "normal" and len(parts) == 3 and 0 <= float(parts[2]) < math.inf:
            return LengthSpec(mean, "normal", float(parts[2]))
    except ValueError:
        pass
    raise UsageError(
        f"{flag} {text!r} is not N, N:uniform or N:normal:SD", fix=f"e.g. {flag} 1024:uniform"
    )


def parse_jsonl(text: str, where: str) -> list[PromptItem]:
    """Parse a JSONL prompt file; a bad line is an error naming its line number."""
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row: Any = jsontext.loads_standard(line)
        except (ValueError, RecursionError) as exc:  # also: too deep, a 5000-digit number
            raise UsageError(
                f"{where}:{number}: not JSON ({jsontext.load_problem(exc)})",
                fix="write one JSON object per line",
            ) from None
        items.append(_item(row, f"{where}:{number}"))
    if not items:
        raise UsageError(f"{where} holds no prompts", fix='write lines like {"prompt": "..."}')
    return items


def _item(row: Any, where: str) -> PromptItem:
    if not isinstance(row, dict):
        raise UsageError(
            f"{where}: each line must be a JSON object", fix='e.g. {"prompt": "Hello"}'
        )
    out = row.get("output_len", row.get("max_tokens"))
    if out is not None and (not isinstance(out, int) or out <= 0):
        raise UsageError(
            f"{where}: output_len must be a positive integer", fix='e.g. "output_len": 128'
        )
    if isinstance(row.get("prompt"), str) and row["prompt"]:
        return PromptItem(prompt=row["prompt"], output_len=out)
    messages = row.get("messages")
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        return PromptItem(messages=tuple(messages), output_len=out)
    raise UsageError(
        f"{where}: needs a non-empty 'prompt' string or a 'messages' list",
        fix='e.g. {"messages": [{"role": "user", "content": "Hello"}]}',
    )


def parse_sharegpt(text: str, where: str) -> list[PromptItem]:
    """Parse a ShareGPT-format JSON file into prompts with output lengths (in words)."""
    try:
        rows: Any = jsontext.loads_standard(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(
            f"{where}: not JSON ({jsontext.load_problem(exc)})",
            fix="pass the ShareGPT file as downloaded, or a JSONL file of prompts",
        ) from None
    if not isinstance(rows, list):
        raise UsageError(
            f"{where}: a ShareGPT file is a JSON list of conversations",
            fix='e.g. [{"conversations": [{"from": "human", "value": "..."}]}]',
        )
    items = []
    for row in rows:
        turns = row.get("conversations") if isinstance(row, dict) else None
        if not isinstance(turns, list):
            continue
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict) or turn.get("from") != "human":
                continue
            prompt = turn.get("value")
            reply = turns[i + 1] if i + 1 < len(turns) else None
            answer = reply.get("value") if isinstance(reply, dict) else None
            if isinstance(prompt, str) and prompt and isinstance(answer, str) and answer:
                items.append(PromptItem(prompt=prompt, output_len=max(1, len(answer.split()))))
            break
    if not items:
        raise UsageError(
            f"{where} holds no human/gpt conversation pairs",
            fix="each conversation needs a human turn followed by a gpt turn",
        )
    return items


def load_dataset_text(text: str, where: str) -> list[PromptItem]:
    """Parse JSONL or ShareGPT (a JSON list) by its first non-space character."""
    return (
        parse_sharegpt(text, where) if text.lstrip().startswith("[") else parse_jsonl(text, where)
    )
