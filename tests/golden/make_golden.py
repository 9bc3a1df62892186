"""Write the golden outputs of `tests/golden/test_golden.py` (one JSON file per case, in data/).

The stored files were taken at commit 4d6e1a1, before the refactor of issue #29 (code moved
between modules, one typed traffic value), from that commit's own sources:

    git worktree add /tmp/golden-base 4d6e1a1
    .venv/bin/python tests/golden/make_golden.py --src /tmp/golden-base/src
    git worktree remove /tmp/golden-base

Regenerated since, each time for one stated change of behaviour (CHANGELOG.md) and checked
to differ from the stored files by exactly that: the render and tune cases when `render
--json` and tune.json gained `schema_version` (issue #29, typed documents; one added key
per file, nothing else moved); the tune cases when tune.json gained `as_is` and tune's
verdict a first line, the winner against the profile as it is (issue #29 item 7; one added
key and one added verdict line per file, which report.md's recommendation now leads with,
nothing else moved).

They prove that the refactor changes no behaviour: the same options give the same records,
summaries, plans, tune documents and launch artifacts. Regenerate them only when a change
of behaviour is intended, and state that change in CHANGELOG.md; never to make the test
pass. `--check` runs the commands twice and writes nothing, failing when a run differs from
the other (the normalisation must cover exactly what differs between two runs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from golden_cases import CASES, ROOT, dumps, golden_path, run_case


def main(argv: list[str] | None = None) -> int:
    """Run every case with servekit from --src and write (or, with --check, compare) it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src",
                        help="the src/ directory of the tree to take the outputs from")  # fmt: skip
    parser.add_argument("--check", action="store_true",
                        help="run twice and compare the runs; write nothing")  # fmt: skip
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    args = parser.parse_args(argv)
    src = args.src.resolve()
    if not (src / "servekit" / "__init__.py").is_file():
        parser.error(f"{src} holds no servekit package")
    chosen = [c for c in CASES if not args.cases or c.name in args.cases]
    differ = []
    with tempfile.TemporaryDirectory(prefix="servekit-golden-") as tmp:
        for case in chosen:
            first = dumps(run_case(case, src, Path(tmp) / "1"))
            if args.check:
                second = dumps(run_case(case, src, Path(tmp) / "2"))
                print(f"{case.name}: {'same' if first == second else 'DIFFERS'}")
                if first != second:
                    differ.append(case.name)
                continue
            path = golden_path(case)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(first, encoding="utf-8")
            print(f"{case.name}: {path.relative_to(ROOT)} ({len(first):,} bytes)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
