"""``tsb check``: run the example topologies under concurrent readers and count anomalies per
consistency level (:mod:`airflow_provider_tsb.maintenance.checker`); exit 1 when READ_COMMITTED,
REPEATABLE_READ or AS OF saw one.

    tsb check [--wordcount-barriers N] [--flights-barriers N] [--kill] [--remote sc://HOST:PORT] [--json]

``tsb check --integrity --topology NAME [--url URL] [--json]`` verifies instead the Delta log of
every retained barrier of a registered topology against the live-file figures its commits
recorded (:mod:`airflow_provider_tsb.maintenance.integrity`): one line per mismatch (table,
barrier, version, expected vs found), exit 1 on any.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow_provider_tsb.cli.common import add_store_options, store_of


def register(sub: Any) -> None:
    """Add ``tsb check`` to the command line."""
    p = sub.add_parser(
        "check", help="run the example topologies under concurrent readers and count anomalies per level"
    )
    p.add_argument("--wordcount-barriers", type=int, default=4)
    p.add_argument("--flights-barriers", type=int, default=2)
    p.add_argument("--workdir", help="folder for the metastore and tables (default: a temporary folder)")
    p.add_argument("--interval", type=float, default=0.05, help="seconds between samples of each reader thread")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--kill", action="store_true",
                   help="run each job as its own process, SIGKILL it once per barrier at a kill point, retry it")
    p.add_argument("--remote", default=os.environ.get("SPARK_REMOTE"), metavar="sc://HOST:PORT",
                   help="run the jobs as Spark Connect clients of this server (default $SPARK_REMOTE; without "
                        "it: a local Spark, and spark-submit processes with --kill)")
    p.add_argument("--output", help="also write the JSON summary to this file")
    p.add_argument("--integrity", action="store_true",
                   help="verify the Delta logs of every retained barrier of --topology against the file counts and "
                        "sizes their commits recorded; exit 1 on any mismatch")
    p.add_argument("--topology", help="the registered topology to verify (with --integrity)")
    add_store_options(p)
    p.set_defaults(func=_cmd)


def _integrity(args: argparse.Namespace) -> int:
    """``tsb check --integrity``: print each mismatch, exit 1 on any."""
    from airflow_provider_tsb.maintenance.integrity import check_integrity

    if not args.topology:
        raise ValueError("tsb check --integrity needs --topology NAME: the registered topology whose tables to verify")
    report = check_integrity(store_of(args), args.topology)
    findings = report.findings or []
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        for finding in findings:
            print(finding.describe())
        print(f"topology {report.topology}: {report.checked} versions verified, {report.unrecorded} without recorded "
              f"figures, {len(findings)} mismatches" + ("; restore the tables' _delta_log" if findings else ""))
    return 1 if findings else 0


def _cmd(args: argparse.Namespace) -> int:
    if args.integrity:
        return _integrity(args)
    if args.wordcount_barriers < 0 or args.flights_barriers < 0:
        raise ValueError("barrier counts must be >= 0")
    workdir = args.workdir or tempfile.mkdtemp(prefix="tsb-check-")
    log = (lambda m: print(m, file=sys.stderr)) if args.json else print
    start = time.monotonic()
    from airflow_provider_tsb.maintenance.checker import format_summary, run_check

    summary = run_check(workdir, wordcount_barriers=args.wordcount_barriers,
                        flights_barriers=args.flights_barriers, interval_s=args.interval, log=log, kill=args.kill,
                        remote=args.remote)
    if args.output:
        Path(args.output).write_text(json.dumps(summary, indent=2, sort_keys=True))
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(format_summary(summary))
        print(f"checked in {time.monotonic() - start:.0f} s (workdir {workdir})")
    consistent = all(
        summary[lv]["anomalies"] == 0 for lv in ("READ_COMMITTED", "REPEATABLE_READ", "AS_OF") if lv in summary
    )
    return 0 if consistent else 1
