#!/usr/bin/env python3
"""Reads the output of one or more runs of `make bench-models` and prints the
rows of docs/performance.md's "Where models and harnesses feel it", one
column per run: each figure beside its baseline and floor, as the
benchmarks printed them (nothing is computed here but what a row names).

Usage: make bench-models > run1.txt; ...; scripts/bench-rows.py run1.txt run2.txt run3.txt
"""
import re
import sys

LINE = re.compile(r"^(Benchmark[\w/]+?)(?:-\d+)?\s+\d+\s+(.*)$")


def parse(path):
    """{benchmark: {unit: value}} of one run's output."""
    runs = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if not m:
                continue
            fields = m.group(2).split()
            metrics = runs.setdefault(m.group(1), {})
            for value, unit in zip(fields[0::2], fields[1::2]):
                try:
                    metrics[unit] = float(value)
                except ValueError:
                    pass
    return runs


# (row, budget, [(label, benchmark, unit, format)])
ROWS = [
    ("bash tool route, median", "<= 1.30x direct", [
        ("", "BenchmarkMCPBash", "tools-direct-ratio", "{:.2f}x"),
        ("POST /exec", "BenchmarkMCPBash", "exec-direct-ratio", "{:.2f}x"),
        ("direct", "BenchmarkMCPBash", "direct-median-µs", "{:.0f} µs"),
        ("floor: direct + fsync", "BenchmarkMCPBash", "durable-direct-median-µs", "{:.0f} µs"),
        ("route / that floor", "BenchmarkMCPBash", "tools-durable-ratio", "{:.2f}x"),
        ("stages: route", "BenchmarkToolStages", "tools-http-direct-ratio", "{:.2f}x"),
        ("its commit", "BenchmarkToolStages", "tools-http-commit-µs", "{:.0f} µs"),
        ("load", "BenchmarkMCPBash", "load1", "{:.1f}"),
    ]),
    ("MCP tools/call of bash, median", "<= 1.50x direct", [
        ("Go client", "BenchmarkMCPBash", "mcp-direct-ratio", "{:.2f}x"),
        ("Go client / durable floor", "BenchmarkMCPBash", "mcp-durable-ratio", "{:.2f}x"),
        ("stages: Go client", "BenchmarkToolStages", "mcp-direct-ratio", "{:.2f}x"),
        ("sent by hand", "BenchmarkToolStages", "mcp-raw-direct-ratio", "{:.2f}x"),
    ]),
    ("live SSE of 256 MiB, lines scanned", ">= 0.50 of the pipe", [
        ("", "BenchmarkOutputDelivery256MiB", "sse-scan-ratio", "{:.2f}"),
        ("every event decoded", "BenchmarkOutputDelivery256MiB", "sse-follow-ratio", "{:.2f}"),
        ("replay", "BenchmarkOutputDelivery256MiB", "sse-replay-ratio", "{:.2f}"),
        ("pipe", "BenchmarkOutputDelivery256MiB", "pipe-MiB/s", "{:.0f} MiB/s"),
        ("load", "BenchmarkOutputDelivery256MiB", "load1", "{:.1f}"),
    ]),
    ("workspace-write, network off, namespaces", "<= 1.20x unrestricted", [
        ("", "BenchmarkExecSandbox", "workspace-write-off-ratio", "{:.2f}x"),
        ("added", "BenchmarkExecSandbox", "workspace-write-off-added-µs", "{:.0f} µs"),
        ("kernel: new mount+net ns", "BenchmarkExecSandbox", "kernel-newns-newnet-added-µs", "{:.0f} µs"),
        ("kernel ratio", "BenchmarkExecSandbox", "kernel-newns-newnet-ratio", "{:.2f}x"),
        ("in process: added", "BenchmarkNamespaces", "workspace-write-off-added-µs", "{:.0f} µs"),
        ("in process: kernel's", "BenchmarkNamespaces", "kernel-newns-newnet-added-µs", "{:.0f} µs"),
        ("in process: net made ahead", "BenchmarkNamespaces", "thread-newns-netahead-added-µs", "{:.0f} µs"),
        ("load", "BenchmarkExecSandbox", "load1", "{:.1f}"),
    ]),
    ("the same under bubblewrap", "<= 2.0x unrestricted", [
        ("", "BenchmarkExecSandbox", "bubblewrap-workspace-write-off-ratio", "{:.2f}x"),
        ("bwrap alone", "BenchmarkExecSandbox", "bwrap-direct-ratio", "{:.2f}x"),
    ]),
    ("allowlist proxy, tunnel throughput", ">= 0.80 of direct", [
        ("", "BenchmarkProxyThroughput", "proxy/direct", "{:.2f}"),
        ("plain relay", "BenchmarkProxyThroughput", "plain-relay/direct", "{:.2f}"),
        ("direct", "BenchmarkProxyThroughput", "direct-MB/s", "{:.0f} MB/s"),
        ("load", "BenchmarkProxyThroughput", "load1", "{:.1f}"),
    ]),
    ("allowlist proxy, connection set-up", "<= +100 µs", [
        ("", "BenchmarkProxyConnect", "added-µs/conn", "+{:.0f} µs"),
        ("plain relay", "BenchmarkProxyConnect", "plain-relay-µs/conn", "{:.0f} µs"),
        ("over the relay", "BenchmarkProxyConnect", "added-over-relay-µs/conn", "{:+.0f} µs"),
        ("direct", "BenchmarkProxyConnect", "direct-µs/conn", "{:.0f} µs"),
    ]),
    ("8 clients POST /exec", ">= 0.90 of direct", [
        ("", "BenchmarkExecConcurrent8", "throughput-ratio", "{:.2f}"),
        ("bare server", "BenchmarkExecConcurrent8", "bare-throughput-ratio", "{:.2f}"),
        ("dshd CPU", "BenchmarkExecConcurrent8", "exec-cpu-µs/op", "{:.0f} µs/op"),
        ("load", "BenchmarkExecConcurrent8", "load1", "{:.1f}"),
    ]),
    ("64 agents, tool route, 8 at a time", "(no budget)", [
        ("", "BenchmarkManyAgents", "tools-http-throughput-ratio", "{:.2f} of direct"),
        ("p99", "BenchmarkManyAgents", "tools-http-p99-µs", "{:.0f} µs"),
        ("MCP", "BenchmarkManyAgents", "mcp-throughput-ratio", "{:.2f} of direct"),
        ("MCP p99", "BenchmarkManyAgents", "mcp-p99-µs", "{:.0f} µs"),
        ("direct p99", "BenchmarkManyAgents", "direct-p99-µs", "{:.0f} µs"),
    ]),
]


def main(paths):
    if not paths:
        sys.exit(__doc__)
    runs = [parse(p) for p in paths]
    for row, budget, figures in ROWS:
        print(f"{row} ({budget})")
        for label, bench, unit, fmt in figures:
            cells = []
            for r in runs:
                v = r.get(bench, {}).get(unit)
                cells.append("—" if v is None else fmt.format(v))
            print(f"  {label or 'figure':<28} " + ", ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1:])
