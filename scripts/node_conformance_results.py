#!/usr/bin/env python3
"""Reads the JUnit report of Kubernetes' node e2e suite and compares it with
the expected-failures list.

Usage: node_conformance_results.py JUNIT.xml EXPECTED_FAILURES.txt [--partial]

Prints one line per spec that the focus selected (`PASS`, `FAIL` or `SKIP`,
its time and its name; a failure's first message line below it), then what
disagrees with the list, then `node conformance: N passed, N failed, N
skipped`. Specs that the focus and skip expressions left out are not
counted. The list has the format of tests/critest-expected-failures.txt
(`<spec name> :: <reason>`, `flaky: <spec name> :: <reason>`), the name as
printed here. Exit status 1 when a spec fails that is not listed, when a
listed spec (not flaky) passes (the list only shrinks: remove it), or when
an entry names no spec of the suite (with --partial, a focused run, entries
that did not run are not reported).
"""

import os
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from critest_results import FAILED_STATES, load_expected  # noqa: E402


def load_specs(path):
    """(name, state, seconds, message, selected) per test case."""
    specs = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if name.startswith("[It] "):
            name = name[len("[It] "):]
        state = case.get("status", "")
        message = ""
        selected = True
        for child in case:
            if child.tag in ("failure", "error"):
                message = child.get("message") or (child.text or "")
                state = state or "failed"
            elif child.tag == "skipped":
                message = child.get("message", "")
                state = state or "skipped"
                # Ginkgo marks specs its filters left out "skipped"; a
                # spec that skipped itself says why after "skipped - ".
                selected = message.strip() not in ("", "skipped")
        if not state:
            state = "passed"
        seconds = float(case.get("time") or 0)
        specs.append((name, state, seconds, message, selected))
    return specs


def first_line(message):
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--partial"):
        print(__doc__, file=sys.stderr)
        return 2
    partial = len(argv) == 4
    expected, problems = load_expected(argv[2])
    specs = load_specs(argv[1])

    passed = failed = skipped = 0
    unexpected_failures, unexpected_passes = [], []
    names = set()
    for name, state, seconds, message, selected in specs:
        names.add(name)
        if not selected:
            continue
        # Ginkgo's suite nodes ([SynchronizedBeforeSuite], reporting, one
        # per parallel process) count only when they fail.
        suite_node = name.startswith("[") and not name.startswith("[sig-")
        if suite_node and state not in FAILED_STATES:
            continue
        listed = expected.get(name)
        if state == "passed":
            passed += 1
            print(f"PASS {seconds:7.1f}s {name}")
            if listed and not listed[0]:
                unexpected_passes.append(name)
        elif state in FAILED_STATES:
            failed += 1
            print(f"FAIL {seconds:7.1f}s {name}")
            print(f"     {state}: {first_line(message)}")
            if not listed:
                unexpected_failures.append(name)
        else:
            skipped += 1
            print(f"SKIP {seconds:7.1f}s {name}: {first_line(message)}")

    if not partial:
        for name in sorted(set(expected) - names):
            problems.append(f"listed but not in the suite: {name}")
    for name in unexpected_failures:
        print(f"UNEXPECTED FAILURE: {name}")
    for name in unexpected_passes:
        print(f"NOW PASSES, remove it from the expected-failures list: {name}")
    for problem in problems:
        print(f"EXPECTED-FAILURES LIST: {problem}")

    print(f"node conformance: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if unexpected_failures or unexpected_passes or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
