"""Benchmark: what redaction costs on a 10 MB text (not a test).

The Redactor (servekit.redaction) replaces every secret, every run of 8 or more of a long
secret's characters, and their JSON-escaped spellings. This times `Redactor.redact` and
`Redactor.found_in` on 10 MB of records.jsonl-like text, for a 22-character and a
56-character API key with a 19-character URL password: text that holds no secret (the
common case), text with backslash escapes but no secret (every escape level is decoded),
and text holding the key whole, cut to its first 20 characters and `\\uXXXX`-escaped every
4,000 characters. Best of 5 runs each.

Run: .venv/bin/python benchmarks/bench_redaction.py
"""

from __future__ import annotations

import json
import random
import string
import time

from servekit.redaction import Redactor

SIZE = 10_000_000
ROUNDS = 5


def _record(rng: random.Random) -> str:
    words = ["the", "answer", "is", "four", "sky", "proj", "and", "key", "token", "sk"]
    return json.dumps({
        "id": f"c=4-{rng.randrange(10**6)}", "point": "c=4",
        "chunk_ns": [rng.randrange(10**12) for _ in range(40)],
        "text": " ".join(rng.choice(words) for _ in range(30)), "error": None,
    })  # fmt: skip


def _texts(key: str) -> dict[str, str]:
    rng = random.Random(1)
    lines = [_record(rng) for _ in range(200)]
    plain = "\n".join(lines)
    plain = (plain + "\n") * (SIZE // (len(plain) + 1) + 1)
    escaped = plain.replace('"', '\\"').replace("sky", "\\u0073ky")  # JSON put into JSON
    cut = key[:20]
    spelled = "".join(f"\\u{ord(c):04x}" for c in key)
    leaky = []
    for at in range(0, SIZE, 4000):
        leaky.append(plain[at : at + 4000 - 80])
        leaky.append(f" Bearer {key} / {cut}... / {spelled} ")
    return {"no secret": plain[:SIZE], "escapes, no secret": escaped[:SIZE],
            "secret every 4 kB": "".join(leaky)[:SIZE]}  # fmt: skip


def _best(call: object, text: str) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        call(text)  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    """Print one table row per key length and text."""
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits
    password = "pw-canary/PASS-91b2"  # noqa: S105 - a made-up secret
    print("| key | text | redact ms | found_in ms | replaced |")
    print("|---|---|---|---|---|")
    for length in (22, 56):
        key = "sk-" + "".join(rng.choice(alphabet) for _ in range(length - 3))
        redactor = Redactor((key, password))
        for name, text in _texts(key).items():
            redact_s = _best(redactor.redact, text)
            found_s = _best(redactor.found_in, text)
            replaced = redactor.redact(text).count("[REDACTED]")
            print(f"| {length} chars | {name} | {redact_s * 1e3:.0f} | {found_s * 1e3:.0f} "
                  f"| {replaced} |")  # fmt: skip


if __name__ == "__main__":
    main()
