"""Build a tiny Llama-shaped model that speaks MiniMax-M3's reasoning and tool-call syntax
(run as a script by the engine tier's fixtures; see
docs/adr/0005-tiny-trained-models-for-the-engine-tier.md).

Usage: python tiny_model.py OUT_DIR --kind target|draft-rand|cjk-rand

Everything is generated here, with no downloads:
- a byte-level BPE tokenizer trained on a small synthetic corpus, with M3's markers
  `<mm:think>`, `</mm:think>` and `]<]minimax[>[` as single NON-special added tokens (vLLM's
  M3 parsers read them from text decoded with skip_special_tokens=True);
- a chat template (in tokenizer_config.json) that pre-fills `<mm:think>` when
  `thinking_mode` is "enabled" and renders tools, tool calls and tool results;
- `target`: LlamaForCausalLM (hidden 256, 2 layers, 4 heads of head_dim 64) trained for a
  minute on synthetic conversations until greedy decoding gives, exactly:
    thinking enabled                          -> reasoning</mm:think>answer
    tools given and "weather" in the user turn -> an M3 tool call of get_weather(Paris)
    the last message is a tool result         -> "The weather in Paris is sunny."
    anything else                             -> "Hello from the tiny test model."
  then checked in transformers on held-out prompts and on servekit validate's own prompts;
- `draft-rand`: the same tokenizer with untrained weights (a draft the target rejects);
- `cjk-rand`: untrained weights over a tokenizer trained on the same corpus plus Chinese
  text, so that its byte-level vocabulary spells common characters as one token and the
  others as two or three byte tokens; greedy decoding of random weights then streams
  tokens that decode to nothing (special tokens, the first bytes of a character) among the
  rest, as a real model's output does in Chinese (issue #28).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from servekit.validate.prompts import (
    CHAT_PROMPT,
    REASONING_PROMPT,
    TOOL_PROMPT,
    TOOL_RESULT,
    ladder_prompt,
)
from servekit.validate.prompts import WEATHER_TOOL as VALIDATE_TOOL

NS = "]<]minimax[>["
THINK_OPEN, THINK_CLOSE = "<mm:think>", "</mm:think>"
BOS, EOS, PAD = "<s>", "<|end|>", "<pad>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]

CHAT_TEMPLATE = """\
{%- set tm = thinking_mode | default('disabled') -%}
{{- bos_token -}}
{%- if tools -%}
<|system|>You may call these tools:
{%- for tool in tools %}{%- set f = tool.function if tool.function is defined else tool %}
<tool>{{ f.name }}({{ (f.parameters.properties if f.parameters is defined and f.parameters and f.parameters.properties is defined else {}) | list | join(', ') }}): {{ f.description | default('') }}</tool>
{%- endfor %}
<|end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.content is string -%}{%- set content = message.content -%}
{%- elif message.content -%}{%- set content = message.content | map(attribute='text') | join('') -%}
{%- else -%}{%- set content = '' -%}{%- endif -%}
{%- if message.role == 'assistant' -%}
<|assistant|>
{%- set r = message.reasoning or message.reasoning_content -%}
{%- if r -%}<mm:think>{{ r }}</mm:think>{%- endif -%}
{{- content -}}
{%- if message.tool_calls -%}
§<tool_call>
{% for tc in message.tool_calls -%}
{%- set fn = tc.function if tc.function is defined else tc -%}
§<invoke name="{{ fn.name }}">
{% if fn.arguments is mapping -%}
{%- for k, v in fn.arguments.items() -%}
§<{{ k }}>{{ v if v is string else v | tojson }}§</{{ k }}>
{% endfor -%}
{%- else -%}{{ fn.arguments }}{%- endif -%}
§</invoke>
{% endfor -%}
§</tool_call>
{%- endif -%}
<|end|>
{% elif message.role == 'tool' -%}
<|tool|>{{ content }}<|end|>
{% elif message.role == 'system' -%}
<|system|>{{ content }}<|end|>
{% else -%}
<|user|>{{ content }}<|end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|>{%- if tm == 'enabled' -%}<mm:think>{%- endif -%}{%- endif -%}
""".replace("§", NS)

ANSWER = "Hello from the tiny test model."
REASONING = "The user wants a short reply. I will answer briefly."
TOOL_REASONING = "The user asks about the weather, so I should call get_weather."
TOOL_RESULT_ANSWER = "The weather in Paris is sunny."
TOOL_RESULT_REASONING = "The tool returned the weather. I will summarise it."
TOOL_CALL = (
    f"{NS}<tool_call>\n"
    f'{NS}<invoke name="get_weather">\n'
    f"{NS}<city>Paris{NS}</city>\n"
    f"{NS}</invoke>\n"
    f"{NS}</tool_call>"
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
OTHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Get the current time.",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    },
]
WORDS = (  # noqa: SIM905 - a word list reads better as text
    "hello hi hey please tell me what is the a an in of for to and today now tomorrow "
    "city Paris London Tokyo Berlin how are you say something write short poem about cats "
    "dogs number two plus four answer question help explain simple test model reply "
    "quickly rain sunny cold hot temperature forecast outside like will be it there do "
    "know current conditions look up could check get data"
).split()
WEATHER_PROMPTS = [
    "What is the weather in Paris?",
    "What's the weather like in Paris today?",
    "weather",
    "Weather in Paris?",
    "Tell me the weather.",
    "How is the weather in London?",
    "Can you check the weather for Tokyo?",
    "weather forecast please",
    "What is the weather?",
    "Get the weather in Berlin.",
]
PLAIN_PROMPTS = [
    "Hello!",
    "Hi",
    "Say hello.",
    "What is 2+2?",
    "Tell me a joke.",
    "Write a haiku about cats.",
    "Who are you?",
    "Explain quantum physics briefly.",
    "hello there",
    "Count to three.",
]


# Chinese text for the cjk-rand tokenizer: sentences drawn from these characters (a few
# hundred distinct ones, so the 1,024-entry vocabulary merges only the common ones).
CJK = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种"
    "面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本"
    "去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比"
    "或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总"
    "次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做"
    "必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权"
    "收证改清美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马"
    "节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断"
    "模型服务请求延迟吞吐缓存调度批量令牌语言推理解码预填充显卡内存并发测试基准"
)


def cjk_corpus(rnd, sentences=600):
    """Chinese sentences of 6-24 characters, the first characters far more frequent."""
    weights = [1.0 / (1 + i) for i in range(len(CJK))]
    return ["".join(rnd.choices(CJK, weights, k=rnd.randint(6, 24))) for _ in range(sentences)]


def build_tokenizer(out_dir, *, cjk=False):
    corpus = []
    rnd = random.Random(0)
    for _ in range(200):
        corpus.append(" ".join(rnd.choice(WORDS) for _ in range(12)))
    corpus += WEATHER_PROMPTS * 20 + PLAIN_PROMPTS * 20
    corpus += [ANSWER, REASONING, TOOL_REASONING, TOOL_RESULT_ANSWER, TOOL_RESULT_REASONING] * 50
    corpus += [TOOL_CALL, json.dumps(WEATHER_TOOL), json.dumps(OTHER_TOOLS)] * 50
    corpus += [
        "You may call these tools: Call a tool as",
        '{"temperature": 20, "condition": "sunny"}',
    ] * 50
    if cjk:
        corpus += cjk_corpus(random.Random(2))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024 if cjk else 768,
        special_tokens=[PAD, BOS, EOS, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    # M3 markers: added, but NOT special (they must survive skip_special_tokens).
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in (THINK_OPEN, THINK_CLOSE, NS)]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=ROLE_TOKENS,
    )
    hf.model_max_length = 2048
    hf.save_pretrained(out_dir)
    # Put the chat template inside tokenizer_config.json (single source of truth).
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["chat_template"] = CHAT_TEMPLATE
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    jinja = os.path.join(out_dir, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)
    hf.chat_template = CHAT_TEMPLATE
    return hf


def random_text(rnd, tok_ids_pool, tok):
    """User text: either a canned prompt or random words / random token soup."""
    k = rnd.random()
    if k < 0.4:
        return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 12)))
    if k < 0.7:
        ids = [rnd.choice(tok_ids_pool) for _ in range(rnd.randint(1, 20))]
        return tok.decode(ids)
    return rnd.choice(PLAIN_PROMPTS)


def weather_text(rnd, tok_ids_pool, tok):
    if rnd.random() < 0.5:
        return rnd.choice(WEATHER_PROMPTS)
    a = random_text(rnd, tok_ids_pool, tok).replace("weather", "")
    b = random_text(rnd, tok_ids_pool, tok).replace("weather", "")
    w = rnd.choice(["weather", "Weather", " weather", "weather?", " weather "])
    return (a[: rnd.randint(0, 40)] + w + b[: rnd.randint(0, 40)]).strip() or "weather"


def sample_example(rnd, tok, pool):
    thinking = rnd.random() < 0.4
    tools = None
    if rnd.random() < 0.6:
        wt = json.loads(json.dumps(WEATHER_TOOL))
        # Vary the tool description so "weather" in the *tools block* is not a cue.
        wt["function"]["description"] = rnd.choice(
            [
                WEATHER_TOOL["function"]["description"],
                "",
                "Weather lookup.",
                "Returns current weather data.",
                "Get the current weather for a city.",
                random_text(rnd, pool, tok)[:60],
            ]
        )
        tools = [wt] + (OTHER_TOOLS if rnd.random() < 0.3 else [])
        if rnd.random() < 0.3:
            tools = list(reversed(tools))
    msgs = []
    if rnd.random() < 0.2:
        msgs.append({"role": "system", "content": random_text(rnd, pool, tok)})
    if rnd.random() < 0.2:  # some prior plain turn
        msgs.append({"role": "user", "content": random_text(rnd, pool, tok).replace("weather", "")})
        msgs.append({"role": "assistant", "content": ANSWER})
    mode = rnd.random()
    if tools and mode < 0.2:  # tool round trip
        msgs.append({"role": "user", "content": weather_text(rnd, pool, tok)})
        msgs.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": "call_0",
                "content": rnd.choice(
                    ['{"temperature": 20, "condition": "sunny"}', "sunny", "20C"]
                ),
            }
        )
        target = (TOOL_RESULT_REASONING + THINK_CLOSE if thinking else "") + TOOL_RESULT_ANSWER
    elif mode < 0.6:
        msgs.append({"role": "user", "content": weather_text(rnd, pool, tok)})
        if tools:
            target = (TOOL_REASONING + THINK_CLOSE if thinking else "") + TOOL_CALL
        else:
            target = (REASONING + THINK_CLOSE if thinking else "") + ANSWER
    else:
        msgs.append({"role": "user", "content": random_text(rnd, pool, tok).replace("weather", "")})
        target = (REASONING + THINK_CLOSE if thinking else "") + ANSWER
    prompt = tok.apply_chat_template(
        msgs,
        tools=tools,
        add_generation_prompt=True,
        tokenize=False,
        thinking_mode="enabled" if thinking else "disabled",
    )
    p_ids = tok.encode(prompt, add_special_tokens=False)
    t_ids = [*tok.encode(target, add_special_tokens=False), tok.eos_token_id]
    return p_ids, t_ids


def self_check(model, tok):
    """Greedy-decode held-out prompts with HF and assert the exact behaviours."""
    cases = [
        (
            [{"role": "user", "content": "Summarize Hamlet in one sentence, please!"}],
            None,
            "disabled",
            ANSWER,
        ),
        (
            [{"role": "user", "content": "What is 17 times 3?"}],
            None,
            "enabled",
            REASONING + THINK_CLOSE + ANSWER,
        ),
        (
            [{"role": "user", "content": "Could you look up current weather conditions for Lyon?"}],
            [WEATHER_TOOL, *OTHER_TOOLS],
            "disabled",
            TOOL_CALL,
        ),
        (
            [{"role": "user", "content": "What's the weather in Paris?"}],
            [WEATHER_TOOL],
            "enabled",
            TOOL_REASONING + THINK_CLOSE + TOOL_CALL,
        ),
        ([{"role": "user", "content": "Say hi"}], [WEATHER_TOOL], "disabled", ANSWER),
        (
            [
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'},
            ],
            [WEATHER_TOOL],
            "disabled",
            TOOL_RESULT_ANSWER,
        ),
    ]
    cases += [  # servekit validate's own prompts must get these exact answers
        ([{"role": "user", "content": CHAT_PROMPT}], None, "disabled", ANSWER),
        ([{"role": "user", "content": REASONING_PROMPT}], None, "enabled",
         REASONING + THINK_CLOSE + ANSWER),
        ([{"role": "user", "content": REASONING_PROMPT}], None, "disabled", ANSWER),
        ([{"role": "user", "content": TOOL_PROMPT}], [VALIDATE_TOOL], "disabled", TOOL_CALL),
        ([{"role": "user", "content": TOOL_PROMPT},
          {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
           "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "tool_call_id": "c1", "content": TOOL_RESULT}], [VALIDATE_TOOL],
         "disabled", TOOL_RESULT_ANSWER),
        *[([{"role": "user", "content": ladder_prompt(i)}], None, "disabled", ANSWER)
          for i in range(16)],
    ]  # fmt: skip
    min_margin = float("inf")
    with torch.no_grad():
        for msgs, tools, tm, want in cases:
            p = tok.apply_chat_template(
                msgs, tools=tools, add_generation_prompt=True, tokenize=False, thinking_mode=tm
            )
            ids = tok.encode(p, add_special_tokens=False)
            target = [*tok.encode(want, add_special_tokens=False), tok.eos_token_id]
            logits = model(input_ids=torch.tensor([ids + target[:-1]])).logits[0, len(ids) - 1 :]
            top2 = logits.topk(2, dim=-1)
            got = top2.indices[:, 0].tolist()
            assert got == target, f"self-check failed: {tok.decode(got)!r} != {want!r}"
            m = (top2.values[:, 0] - top2.values[:, 1]).min().item()
            print(f"  margin {m:6.2f}  {msgs[-1]['content'][:40]!r} tools={bool(tools)} {tm}")
            min_margin = min(min_margin, m)
    print(f"self-check OK ({len(cases)} cases, min top1-top2 logit margin {min_margin:.2f})")


EXTRA_ROUNDS = 2  # at most this many more rounds of training when the self-check fails
EXTRA_STEPS = 200


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--kind", choices=["target", "draft-rand", "cjk-rand"], default="target")
    ap.add_argument("--steps", type=int, default=400)
    args = ap.parse_args()
    train = args.kind == "target"
    seed = {"target": 0, "draft-rand": 1, "cjk-rand": 2}[args.kind]
    t0 = time.time()
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(args.out_dir, exist_ok=True)
    tok = build_tokenizer(args.out_dir, cjk=args.kind == "cjk-rand")
    for marker in (THINK_OPEN, THINK_CLOSE, NS):
        assert len(tok.encode(marker, add_special_tokens=False)) == 1, marker
    hidden = 256
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=2, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
        head_dim=64, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, torch_dtype="float32",
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    if train:
        fit(model, tok, random.Random(seed), args.steps)
    # The recipe is seeded, but what a seed trains depends on the library versions (250
    # steps passed in earlier CI runs and, with transformers 5.19.0, missed one tool-call
    # case): train on while the self-check fails, a bounded number of extra rounds.
    for extra in range(EXTRA_ROUNDS + 1):
        model.eval()
        try:
            if train:
                self_check(model, tok)
            break
        except AssertionError:
            if extra == EXTRA_ROUNDS:
                raise
            print(f"self-check failed; training {EXTRA_STEPS} more steps")
            fit(model, tok, random.Random(seed + 1 + extra), EXTRA_STEPS)
    model.generation_config.do_sample = False
    for key in ("temperature", "top_p", "top_k"):  # vLLM takes these as default sampling
        setattr(model.generation_config, key, None)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    print(json.dumps({"kind": args.kind, "seconds": round(time.time() - t0, 1),
                      "params": sum(p.numel() for p in model.parameters())}))  # fmt: skip


def fit(
    model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, rnd: random.Random, steps: int
) -> None:
    """Train on fresh synthetic conversations each step; the loss covers the reply only,
    with the two tokens where the model decides which reply to give weighted x5 (the
    first reply token and the one after `</mm:think>`)."""
    special = set(tok.all_special_ids) | {
        tok.convert_tokens_to_ids(m) for m in (THINK_OPEN, THINK_CLOSE, NS)
    }
    weather_ids = {i for t, i in tok.get_vocab().items() if "eather" in t}
    pool = [i for i in range(len(tok)) if i not in special and i not in weather_ids]
    think_close_id = tok.convert_tokens_to_ids(THINK_CLOSE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05, 1 - s / steps)
    )
    model.train()
    bs = 16
    for step in range(steps):
        batch = [sample_example(rnd, tok, pool) for _ in range(bs)]
        length = max(len(p) + len(t) for p, t in batch)
        ids = torch.full((bs, length), tok.pad_token_id)
        labels = torch.full((bs, length), -100)
        att = torch.zeros((bs, length), dtype=torch.long)
        for i, (p, t) in enumerate(batch):
            seq = p + t
            ids[i, : len(seq)] = torch.tensor(seq)
            labels[i, len(p) : len(seq)] = torch.tensor(t)
            att[i, : len(seq)] = 1
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        tgt = labels[:, 1:]
        weight = torch.zeros_like(tgt, dtype=torch.float)
        weight[tgt != -100] = 1.0
        for i, (p, t) in enumerate(batch):
            weight[i, len(p) - 1] = 5.0
            if think_close_id in t:
                weight[i, len(p) - 1 + t.index(think_close_id) + 1] = 5.0
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), tgt.reshape(-1).clamp(min=0), reduction="none"
        )
        loss = (ce * weight.reshape(-1)).sum() / weight.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
