"""Benchmark: the memory planner against real vLLM startups (issue #15's fidelity check).

Plans every entry of a corpus (default: the repo copy, benchmarks/corpus/real-startups)
through the public CLI path (`servekit profiles new` from the entry's config.json, its
launch settings, GPU and vLLM version, then `servekit plan --json`) and prints, per entry,
weights, available KV memory, KV tokens and max concurrency, predicted against logged,
then the distribution against the bounds. With --seed it also re-plans MiniMax-M3 on
8x A800 and compares it with the deployment's reported figures.

Run: PYTHONPATH=src .venv/bin/python benchmarks/planner_fidelity.py [--corpus DIR] [--json]
     [--markdown] [--seed benchmarks/corpus/seed.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from servekit.cli._fidelity import read_corpus, run_corpus
from servekit.cli.main import cli
from servekit.plan.fidelity import FIGURES, EntryResult, FigureResult, FigureStats, distribution

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO / "benchmarks" / "corpus" / "real-startups"
HEADERS = {
    "weights": "weights GiB",
    "available_kv": "avail. KV GiB",
    "kv_tokens": "KV tokens",
    "max_concurrency": "max conc.",
}
BOUNDS = {
    "weights": "within 2% on >= 90%",
    "available_kv": "within max(5%, 1 GiB) on >= 80%",
    "kv_tokens": "within 5% on >= 80%",
    "max_concurrency": "(no bound)",
}
MARK = {"within": "", "planned": "", "outside": " !", "failed": " FAILED"}


def cell(f: FigureResult) -> str:
    """One figure as 'predicted / logged (error)', or why it is not compared."""
    if f.status == "not printed":
        return "-"
    if f.status == "incomplete":
        return "n/a"
    if f.status == "failed" or f.predicted is None or f.logged is None:
        return "FAILED"
    digits = 0 if f.figure == "kv_tokens" else 2
    err = f"{f.error:+.1%}" if f.error is not None else "?"
    star = "*" if f.basis != "plan" else ""
    return f"{f.predicted:,.{digits}f} / {f.logged:,.{digits}f} ({err}){star}{MARK[f.status]}"


def table_rows(results: Sequence[EntryResult]) -> list[list[str]]:
    """Header plus one row per entry."""
    rows = [["entry", *(HEADERS[f] for f in FIGURES), "KV tokens at logged KV GiB"]]
    for r in results:
        diagnostic = r.tokens_at_logged_kv
        extra = cell(diagnostic).replace("*", "") if diagnostic else "-"
        rows.append([r.entry_id, *(cell(r.figure(f)) for f in FIGURES), extra])
    return rows


def stats_line(s: FigureStats) -> str:
    """One figure's distribution as text."""
    share = s.share_within
    within = "" if s.within is None else f"{s.within}/{s.compared} within ({share or 0:.0%}), "
    med = "-" if s.median_abs_error is None else f"{s.median_abs_error:.1%}"
    top = "-" if s.max_abs_error is None else f"{s.max_abs_error:.1%}"
    return (
        f"{HEADERS[s.figure]:<14} {within}{s.failed} failed, median |err| {med}, max {top}, "
        f"{s.incomplete} incomplete; bound: {BOUNDS[s.figure]}"
    )


def incomplete_lines(results: Sequence[EntryResult]) -> list[str]:
    """Every figure an entry prints but cannot predict, and failures, with the reason."""
    out: list[str] = []
    for r in results:
        reasons: dict[str, list[str]] = {}
        for f in r.figures:
            if f.status in ("incomplete", "failed"):
                reasons.setdefault(f.reason, []).append(f.figure)
        for reason, names in reasons.items():
            out.append(f"{r.entry_id}: {', '.join(names)}: {reason}")
    return out


def text_table(rows: list[list[str]]) -> str:
    """Rows aligned in columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows
    )


def markdown_table(rows: list[list[str]]) -> str:
    """Rows as a Markdown table."""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def seed_comparison(seed_path: Path) -> dict[str, Any]:
    """MiniMax-M3 on 8x A800 planned through the CLI against the deployment's figures."""
    seed = json.loads(seed_path.read_text(encoding="utf-8"))
    result = CliRunner().invoke(cli, ["plan", seed["profile"], "--json"])
    per_gpu = json.loads(result.stdout)["per_gpu"]
    reported = seed["memory_per_gpu"]
    pairs = {
        "weights": (per_gpu["weights_gib"], reported["weights"]),
        "cuda_graphs": (per_gpu["cuda_graphs_gib"], reported["cuda_graphs"]),
        "kv_cache": (per_gpu["kv_cache_gib"], reported["kv_cache"]),
    }
    return {
        name: {"planned": p, "reported": r, "error": round((p - r) / r, 4)}
        for name, (p, r) in pairs.items()
    }


def as_json(results: Sequence[EntryResult], seed: dict[str, Any] | None) -> dict[str, Any]:
    """The whole benchmark as one JSON document."""

    def figure(f: FigureResult) -> dict[str, Any]:
        return {k: v for k, v in vars_of(f).items() if v not in (None, "")}

    return {
        "entries": [
            {
                "id": r.entry_id,
                "figures": [figure(f) for f in r.figures],
                **(
                    {"kv_tokens_at_logged_kv": figure(r.tokens_at_logged_kv)}
                    if r.tokens_at_logged_kv
                    else {}
                ),
                "notes": list(r.notes),
                **({"problem": r.problem} if r.problem else {}),
            }
            for r in results
        ],
        "distribution": [
            {**vars_of(s), "misses": list(s.misses), "bound": BOUNDS[s.figure]}
            for s in distribution(results)
        ],
        **({"minimax_m3_seed": seed} if seed else {}),
    }


def vars_of(value: object) -> dict[str, Any]:
    """A slots dataclass's fields as a dict."""
    return {name: getattr(value, name) for name in value.__slots__}  # type: ignore[attr-defined]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the per-entry table and the distribution (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--markdown", action="store_true", help="tables as Markdown")
    parser.add_argument("--seed", type=Path, help="seed.json: also compare MiniMax-M3 on A800")
    args = parser.parse_args(argv)
    results = run_corpus(read_corpus(args.corpus))
    seed = seed_comparison(args.seed) if args.seed else None
    if args.json:
        print(json.dumps(as_json(results, seed), indent=2))
        return 0
    rows = table_rows(results)
    print(markdown_table(rows) if args.markdown else text_table(rows))
    print("\n* tokens planned at the KV memory the log printed (the entry's budget is unknown)")
    print("! outside the bound\n")
    for s in distribution(results):
        print(stats_line(s))
    print("\nnot compared (the entry does not say enough) or failed:")
    for line in incomplete_lines(results):
        print(f"- {line}")
    for r in results:
        for note in r.notes:
            print(f"  note {r.entry_id}: {note}")
    if seed:
        print("\nMiniMax-M3-MXFP8 on 8x A800 against the deployment (seed.json):")
        for name, row in seed.items():
            print(
                f"  {name}: planned {row['planned']:.2f} GiB, reported {row['reported']} GiB, "
                f"{row['error']:+.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
