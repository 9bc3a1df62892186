"""A vLLM log's analysis for people (view, rich): capacity figures, failures, known issues."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from servekit.doctor.log_analysis import LogAnalysis


def print_analysis(
    console: Console, analysis: LogAnalysis, source: str, *, verdict: bool = True
) -> None:
    """Print a log analysis for people (with a closing verdict line unless told not to)."""
    f = analysis.figures
    what = ", ".join(x for x in (f.model, f.architecture and f"({f.architecture})") if x)
    console.print(f"[bold]{escape(source)}[/bold]: vLLM {f.vllm_version or '?'} {escape(what)}")
    for line in capacity_lines(analysis):
        console.print(f"  {line}")
    if f.failures:
        console.print(f"[bold red]{len(f.failures)} failure line(s)[/bold red]")
        for failure in f.failures[:10]:
            console.print(f"  line {failure.line_no} {failure.kind}: {escape(failure.text[:200])}")
        if len(f.failures) > 10:
            console.print(f"  ... and {len(f.failures) - 10} more")
    for hit in analysis.issues:
        style = "bold red" if hit.on_failure else "yellow"
        console.print(f"[{style}]known issue {hit.issue.id}[/]: {escape(hit.issue.title)}")
        for number, text in hit.lines:
            console.print(f"  line {number}: {escape(text[:200])}")
        console.print(f"  fixed in: {escape(hit.issue.fixed_in)}")
        console.print(f"  [bold]fix:[/bold] {escape(hit.issue.fix.summary)}")
        for ref in hit.issue.references:
            console.print(f"  see {escape(ref)}")
    if not verdict:
        return
    if analysis.failed:
        console.print("[bold red]verdict: the log shows a failure (exit 3)[/bold red]")
    elif analysis.started:
        console.print("verdict: healthy start")
    else:
        console.print("verdict: no failure, but the engine did not report its KV capacity yet")


def capacity_lines(analysis: LogAnalysis) -> list[str]:
    """The startup figures as short lines; empty when the log has none."""
    f = analysis.figures
    lines = []
    if f.weights_gib is not None:
        load = f" loaded in {f.model_load_s:.0f} s" if f.model_load_s is not None else ""
        lines.append(f"weights: {f.weights_gib:.2f} GiB per GPU{load}")
    if f.available_kv_gib is not None:
        lines.append(f"KV cache memory: {f.available_kv_gib:.2f} GiB per GPU")
    if f.kv_cache_tokens is not None:
        text = f"KV capacity: {f.kv_cache_tokens:,} tokens"
        if f.max_concurrency is not None and f.concurrency_tokens_per_request is not None:
            text += (
                f", max concurrency {f.max_concurrency:.2f}x at "
                f"{f.concurrency_tokens_per_request:,} tokens per request"
            )
        lines.append(text)
    graphs = []
    if f.estimated_cuda_graph_gib is not None:
        graphs.append(f"estimated {f.estimated_cuda_graph_gib:.2f} GiB")
    if f.graph_capture_gib is not None:
        graphs.append(f"captured {f.graph_capture_gib:.2f} GiB")
    if f.cudagraph_profiling is not None:
        graphs.append(f"memory profiling {'on' if f.cudagraph_profiling else 'off'}")
    if graphs:
        lines.append("CUDA graphs: " + ", ".join(graphs))
    if f.max_len_estimate is not None:
        lines.append(f"vLLM's estimated maximum model length: {f.max_len_estimate:,}")
    return lines
