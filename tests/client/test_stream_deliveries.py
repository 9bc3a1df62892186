"""Every chunk that delivers a token is counted and timed, whatever its text (issue #28).

The shapes are vLLM 0.32's: a chat stream opens with a role chunk (`content: ""`, usage 0),
every engine step is one chunk (its text empty when the tokens decode to nothing), with
`return_token_ids` each choice carries `token_ids` (also on a chunk a parser held back,
whose delta is `{}`), and the final usage-only chunk has empty choices.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from servekit.client.stream import StreamReader, StreamResult


def _chunk(obj: str, choice: dict[str, Any], usage: int | None, ids: list[int] | None,
           finish: str | None) -> str:  # fmt: skip
    choice["finish_reason"] = finish
    if ids is not None:
        choice["token_ids"] = ids
    body: dict[str, Any] = {"object": obj, "choices": [choice]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": 5, "completion_tokens": usage}
    return json.dumps(body)


def chat(delta: dict[str, Any], *, usage: int | None = None, ids: list[int] | None = None,
         finish: str | None = None) -> str:  # fmt: skip
    """One chat chunk."""
    return _chunk("chat.completion.chunk", {"index": 0, "delta": delta}, usage, ids, finish)


def completion(text: str, *, usage: int | None = None, ids: list[int] | None = None,
               finish: str | None = None) -> str:  # fmt: skip
    """One /v1/completions chunk."""
    return _chunk("text_completion", {"index": 0, "text": text}, usage, ids, finish)


def final_usage(completion_tokens: int) -> str:
    """The usage-only chunk at the end of a stream."""
    return json.dumps(
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": completion_tokens}}
    )


def read(events: list[str], *, max_tokens: int | None = 64) -> StreamResult:
    """Feed the events 10 ns apart (from t=10), then [DONE]."""
    reader = StreamReader(max_tokens=max_tokens)
    for index, data in enumerate(events, start=1):
        reader.feed(data, index * 10)
    reader.feed("[DONE]", (len(events) + 1) * 10)
    return reader.finish()


ROLE = chat({"role": "assistant", "content": ""}, usage=0)


def test_sixty_four_empty_text_chunks_are_sixty_four_tokens() -> None:
    """The reproduction: 64 chunks of `text: ""` and usage 64 is a success of 64 tokens,
    each timed at its own chunk (not `empty_output`)."""
    r = read([completion("", usage=i) for i in range(1, 65)] + [final_usage(64)])
    assert r.error_kind is None
    assert r.chunk_tokens == [1] * 64
    assert r.chunk_ns == [i * 10 for i in range(1, 65)]
    assert (r.text_chunks, r.token_source, r.completion_tokens) == (0, "chunk_usage", 64)
    assert r.first_token_ns == 10


def test_all_empty_with_final_usage_only_is_spread() -> None:
    """Without per-chunk usage the final count goes over the empty-text chunks too."""
    r = read([completion("") for _ in range(8)] + [final_usage(8)])
    assert r.error_kind is None
    assert (r.chunk_tokens, r.token_source) == ([1] * 8, "final_usage")


def test_a_split_character_keeps_its_first_tokens_time() -> None:
    """A character spelled by two tokens: the first chunk is empty, the character comes
    with the next; both tokens keep their arrival time (two deliveries, not one of two)."""
    r = read([ROLE, chat({"content": "Hi"}, usage=1), chat({"content": ""}, usage=2),
              chat({"content": "语"}, usage=3), final_usage(3)])  # fmt: skip
    assert r.chunk_ns == [20, 30, 40]
    assert r.chunk_tokens == [1, 1, 1]
    assert r.text == "Hi语"
    assert r.text_chunks == 2


def test_token_ids_count_every_token_exactly() -> None:
    """With token ids each chunk carries len(ids) tokens: an empty delta a parser held
    back, a speculative chunk of three; the role chunk (no ids) carries none."""
    role = chat({"role": "assistant", "content": ""})
    r = read([role, chat({"reasoning": "a"}, ids=[7]), chat({}, ids=[8]),
              chat({"content": "b c d"}, ids=[1, 2, 3]), chat({"content": ""}, ids=[4],
              finish="length"), final_usage(6)])  # fmt: skip
    assert r.error_kind is None
    assert r.token_source == "token_ids"  # noqa: S105 - not a secret
    assert r.chunk_ns == [20, 30, 40, 50]
    assert r.chunk_tokens == [1, 1, 3, 1]
    assert r.first_token_ns == 20
    assert r.first_answer_ns == 40
    # the held-back token belongs to the answer that follows it; the last to the text before
    assert r.reasoning_tokens == 1


def test_token_ids_that_disagree_with_usage_are_invalid() -> None:
    """Token ids adding up to 2 against usage 3 are two statements of the server that cannot
    both be true: invalid_usage, one token per chunk."""
    r = read([chat({"content": "a"}, ids=[1]), chat({"content": "b"}, ids=[2]), final_usage(3)])
    assert r.error_kind == "invalid_usage"
    assert "token_ids hold 2 tokens but usage counts 3" in (r.error or "")
    assert (r.chunk_tokens, r.token_source) == ([1, 1], "one_per_chunk")


def test_the_role_chunk_and_a_bare_finish_chunk_deliver_nothing() -> None:
    """Without counts on the chunks, the role chunk and a chunk with only a finish reason
    are not deliveries: TTFT is the first token's chunk and the count is spread over the
    chunks between."""
    role = chat({"role": "assistant", "content": ""})
    finish = chat({}, finish="stop")
    r = read([role, chat({"content": "a"}), chat({"content": ""}), finish, final_usage(4)])
    assert r.chunk_ns == [20, 30]
    assert r.chunk_tokens == [2, 2]
    assert r.first_token_ns == 20
    assert r.finish_reason == "stop"


def test_a_finish_chunk_with_a_usage_increase_delivers() -> None:
    """With per-chunk usage a finish chunk whose count rose delivered that token."""
    r = read([ROLE, chat({"content": "a"}, usage=1), chat({}, usage=2, finish="length")])
    assert (r.chunk_ns, r.chunk_tokens) == ([20, 30], [1, 1])


def test_tokens_the_server_counted_but_no_chunk_showed() -> None:
    """Usage says 3 tokens and no choice chunk carried any: not empty, the 3 tokens arrive
    with the chunk that reported them."""
    r = read([ROLE, final_usage(3)])
    assert r.error_kind is None
    assert (r.chunk_ns, r.chunk_tokens) == ([20], [3])


@pytest.mark.parametrize(
    "events",
    [
        [ROLE, final_usage(0)],  # the server counted no token
        [chat({"role": "assistant", "content": ""})],  # no count, no delivery
        [chat({"content": 5})],  # no text and no count: nothing was delivered
    ],
)
def test_empty_output_only_when_the_server_counted_nothing(events: list[str]) -> None:
    """`empty_output` is kept for a stream without deliveries and without a count."""
    assert read(events).error_kind == "empty_output"


def test_more_empty_chunks_than_tokens_keep_the_text_chunks() -> None:
    """A final count of 2 over one text chunk and three empty ones: the text chunk and the
    first empty one carry a token each, the others none."""
    r = read([chat({"content": "a"}), chat({"content": ""}), chat({"content": ""}),
              chat({"content": ""}), final_usage(2)])  # fmt: skip
    assert r.error_kind is None
    assert (r.chunk_ns, r.chunk_tokens) == ([10, 20], [1, 1])


def test_token_ids_not_a_list_is_malformed() -> None:
    """`token_ids: 5` is classified, never raised."""
    assert read([chat({"content": "a"}, ids=5)]).error_kind == "malformed_chunk"  # type: ignore[arg-type]


def test_reasoning_tokens_include_the_empty_ones_inside_reasoning() -> None:
    """An empty-text token between reasoning chunks is a reasoning token."""
    r = read([ROLE, chat({"reasoning": "a"}, usage=1), chat({"reasoning": ""}, usage=2),
              chat({"reasoning": "语"}, usage=3), chat({"content": "x"}, usage=4)])  # fmt: skip
    assert r.reasoning_tokens == 3
    assert r.reasoning_text == "a语"
