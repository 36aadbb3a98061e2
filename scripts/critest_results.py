#!/usr/bin/env python3
"""Compares a critest (Ginkgo v2) JSON report with the expected-failures list.

Usage: critest_results.py REPORT.json EXPECTED_FAILURES.txt [--partial]

The list names each spec expected to fail by its full Ginkgo text:

    <full spec text> :: <one-line reason>
    flaky: <full spec text> :: <reason it may pass or fail>

Exit status 1 when a spec fails that is not listed, when a listed spec
(not flaky) passes (the list must only shrink: remove it), or when an entry
matches no spec in the suite (a typo or a renamed spec). Skipped specs are
neither passes nor failures. With --partial (a focused run), entries that did
not run are not reported. The last line is
`critest: N passed, N failed, N skipped`.
"""

import json
import sys

FAILED_STATES = {"failed", "panicked", "timedout", "interrupted", "aborted"}
SEPARATOR = " :: "


def load_expected(path):
    entries = {}
    problems = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            flaky = line.startswith("flaky:")
            if flaky:
                line = line[len("flaky:"):].strip()
            if SEPARATOR not in line:
                problems.append(f"{path}:{number}: no ' :: <reason>'")
                continue
            text, reason = (part.strip() for part in line.rsplit(SEPARATOR, 1))
            if not reason:
                problems.append(f"{path}:{number}: empty reason")
            if text in entries:
                problems.append(f"{path}:{number}: listed twice: {text}")
            entries[text] = (flaky, reason)
    return entries, problems


def load_specs(path):
    with open(path, encoding="utf-8") as report:
        suites = json.load(report)
    specs = []
    for suite in suites:
        for spec in suite.get("SpecReports") or []:
            if spec.get("LeafNodeType") != "It":
                continue
            text = " ".join(
                part
                for part in (spec.get("ContainerHierarchyTexts") or [])
                + [spec.get("LeafNodeText", "")]
                if part
            )
            message = (spec.get("Failure") or {}).get("Message", "")
            specs.append((text, spec.get("State", ""), message))
    return specs


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--partial"):
        print(__doc__, file=sys.stderr)
        return 2
    partial = len(argv) == 4
    expected, problems = load_expected(argv[2])
    specs = load_specs(argv[1])

    passed = failed = skipped = 0
    unexpected_failures, unexpected_passes = [], []
    ran = set()
    for text, state, message in specs:
        ran.add(text)
        listed = expected.get(text)
        if state == "passed":
            passed += 1
            if listed and not listed[0]:
                unexpected_passes.append(text)
        elif state in FAILED_STATES:
            failed += 1
            if not listed:
                unexpected_failures.append((text, state, message))
        else:
            skipped += 1

    if not partial:
        for text in sorted(set(expected) - ran):
            problems.append(f"listed but not in the suite: {text}")

    for text, state, message in unexpected_failures:
        first_line = message.strip().splitlines()[0] if message.strip() else ""
        print(f"UNEXPECTED FAILURE ({state}): {text}\n    {first_line}")
    for text in unexpected_passes:
        print(f"NOW PASSES, remove it from the expected-failures list: {text}")
    for problem in problems:
        print(f"EXPECTED-FAILURES LIST: {problem}")

    print(f"critest: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if unexpected_failures or unexpected_passes or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
