"""Assemble scripts/gpu-check's outputs into one Markdown and JSON report.

The sections whose outputs are in the work directory replace those of a report
already in the output directory for the same commit and device; the others are
kept from it, so that the steps of a check can be run in separate calls.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.table1 import device_description, table

SANITIZERS = ("memcheck", "racecheck", "synccheck")
MESSAGE_CHARACTERS = 300  # of a failed test's message in the report


def suite_counts(root: ET.Element) -> dict[str, int]:
    suites = [root] if root.tag == "testsuite" else list(root)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def failed_tests(root: ET.Element) -> dict[str, str]:
    """Each failed or erroring test's name with the first line of its message (the
    exception, as pytest gives it), cut to `MESSAGE_CHARACTERS`."""
    found = {}
    for case in root.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            message = (problem.get("message") or "").strip().split("\n")[0]
            if len(message) > MESSAGE_CHARACTERS:
                message = message[:MESSAGE_CHARACTERS - 3] + "..."
            found[f"{case.get('classname')}::{case.get('name')}"] = message
    return found


def tail(path: Path, lines: int = 5) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-lines:]


def suite_section(work: Path) -> dict | None:
    if (work / "suite.xml").exists():
        root = ET.parse(work / "suite.xml").getroot()
        failed = failed_tests(root)
        return {"finished": True, "counts": suite_counts(root), "failed": list(failed),
                "messages": failed}
    if (work / "suite.log").exists():
        return {"finished": False, "log_tail": tail(work / "suite.log")}
    return None


def sanitizer_section(work: Path) -> dict | None:
    found = {}
    for tool in SANITIZERS:
        log = work / f"{tool}.log"
        if log.exists():
            text = log.read_text(errors="replace")
            summaries = [line.strip() for line in text.splitlines()
                         if "ERROR SUMMARY" in line or "RACECHECK SUMMARY" in line]
            done = "sanitizer cases done" in text
            found[tool] = (summaries[-1] if summaries else "no summary") + (
                "" if done else " (the cases did not finish)")
    if (work / "sanitizers-missing.log").exists():
        found = {tool: "compute-sanitizer not available" for tool in SANITIZERS}
    return found or None


def table1_section(work: Path) -> dict | None:
    if (work / "table1.json").exists():
        return json.loads((work / "table1.json").read_text())
    if (work / "table1.log").exists():
        return {"finished": False, "log_tail": tail(work / "table1.log")}
    return None


def markdown(report: dict) -> str:
    environment = report["environment"]
    lines = [f"# GPU check: {environment['device']}", "", f"- commit: `{report['commit']}`",
             *[f"- {key}: {value}" for key, value in environment.items() if key != "device"],
             "", "## Suite", ""]
    suite = report.get("suite")
    if suite is None:
        lines.append("not run")
    elif not suite["finished"]:
        lines += ["did not finish; the log ends:", "", "```", *suite["log_tail"], "```"]
    else:
        counts = suite["counts"]
        lines.append(f"{counts['passed']} passed, {counts['failures'] + counts['errors']} "
                     f"failed, {counts['skipped']} skipped ({counts['tests']} collected)")
        if suite["failed"]:
            messages = suite.get("messages", {})  # absent from reports before they were kept
            lines += [""] + [f"- FAILED {name}" + (f": {messages[name]}" if messages.get(name)
                                                   else "") for name in suite["failed"]]
    lines += ["", "## compute-sanitizer", ""]
    sanitizers = report.get("sanitizers") or {}
    lines += [f"- {tool}: {summary}" for tool, summary in sanitizers.items()] or ["not run"]
    lines += ["", "## Table 1 (float32, batch 1; time-major, then time-contiguous)", ""]
    table1 = report.get("table1")
    if table1 is None:
        lines.append("not run")
    elif "rows" not in table1:
        lines += ["did not finish; the log ends:", "", "```", *table1["log_tail"], "```"]
    else:
        lines.append(table(table1))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commit", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", default="suite,sanitizers,table1")
    args = parser.parse_args()

    import cupy

    environment = device_description(cupy) | {"python": platform.python_version()}
    try:
        import torch

        environment["torch"] = torch.__version__
    except ImportError:
        pass
    stem = f"gpu-check-{environment['device'].replace(' ', '-')}-{args.commit[:10]}"
    path = args.out / f"{stem}.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    report.update(commit=args.commit, environment=environment)
    sections = {"suite": suite_section, "sanitizers": sanitizer_section,
                "table1": table1_section}
    for step in args.steps.split(","):
        section = sections[step](args.work)
        if section is not None:
            report[step] = section
    path.write_text(json.dumps(report, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
