"""Assemble scripts/gpu-check's outputs into one Markdown and JSON report."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.table1 import device_description, table


def suite_counts(junit: Path) -> dict[str, int]:
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def failed_tests(junit: Path) -> list[str]:
    names = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            names.append(f"{case.get('classname')}::{case.get('name')}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commit", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sanitizers", default="")
    args = parser.parse_args()

    import cupy

    environment = device_description(cupy) | {"python": platform.python_version()}
    try:
        import torch

        environment["torch"] = torch.__version__
    except ImportError:
        pass
    counts = suite_counts(args.work / "suite.xml")
    failed = failed_tests(args.work / "suite.xml")
    table1 = json.loads((args.work / "table1.json").read_text())
    report = {"commit": args.commit, "environment": environment, "suite": counts,
              "failed": failed, "sanitizers": args.sanitizers.strip().splitlines(),
              "table1": table1["rows"]}
    device = environment["device"].replace(" ", "-")
    stem = f"gpu-check-{device}-{args.commit[:10]}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# GPU check: {environment['device']}", "",
        f"- commit: `{args.commit}`",
        *[f"- {key}: {value}" for key, value in environment.items() if key != "device"], "",
        "## Suite", "",
        f"{counts['passed']} passed, {counts['failures'] + counts['errors']} failed, "
        f"{counts['skipped']} skipped ({counts['tests']} collected)", "",
        *[f"- FAILED {name}" for name in failed], "",
        "## compute-sanitizer", "",
        *([f"- {line}" for line in report["sanitizers"]] or ["- not available"]), "",
        "## Table 1 (float32, batch 1, time-major)", "",
        table(table1), "",
    ]
    (args.out / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
