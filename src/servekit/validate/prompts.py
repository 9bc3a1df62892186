"""The fixed prompts and tool of `servekit validate` (core).

They are fixed so that results compare across runs and servers, and so that the real-engine
test tier can teach its tiny model to answer exactly these (tests/engine).
"""

from __future__ import annotations

from typing import Any

CHAT_PROMPT = "Say hello in one short sentence."
REASONING_PROMPT = "What is 12 plus 30? Think it through, then answer."
TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."
TOOL_RESULT = '{"city": "Paris", "temperature_c": 18, "conditions": "sunny"}'
NEEDLE_QUESTION = "What is the secret code? Answer with the code only."
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TOPICS = (
    "the sea", "a mountain", "rain", "a city at night", "bread", "a library", "trains",
    "winter", "a garden", "the moon", "coffee", "a bridge", "music", "the desert", "a market",
    "snow", "a river", "bees", "a lighthouse", "autumn", "clocks", "a forest", "tea", "kites",
    "a harbour", "stars", "a bicycle", "salt", "a violin", "fog", "a lantern", "maps",
)  # fmt: skip


def ladder_prompt(index: int) -> str:
    """The index-th distinct ladder prompt (cycling through 32 topics)."""
    topic = TOPICS[index % len(TOPICS)]
    suffix = f" (variant {index // len(TOPICS)})" if index >= len(TOPICS) else ""
    return f"Write one sentence about {topic}.{suffix}"


def thinking_off(template_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The chat-template arguments that turn thinking off, from the ones that turn it on:
    "enabled" becomes "disabled" and true becomes false (M3's thinking_mode, Qwen's
    enable_thinking)."""
    flipped: dict[str, Any] = {}
    for key, value in template_kwargs.items():
        if value == "enabled":
            flipped[key] = "disabled"
        elif value is True:
            flipped[key] = False
        else:
            flipped[key] = value
    return flipped
