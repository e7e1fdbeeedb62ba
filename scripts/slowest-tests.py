#!/usr/bin/env python3
"""Prints the slowest tests of a run, from the JUnit files ctest wrote
(--output-junit), one per stage: `make test` ends with it, so that the next
test that makes the suite slow is plain to see the day it lands.

usage: slowest-tests.py N FILE...   (each FILE named STAGE.xml)
"""
import os
import sys
import xml.etree.ElementTree as ET


def main():
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        sys.exit("usage: slowest-tests.py N FILE...")
    n = int(sys.argv[1])
    rows = []
    for path in sys.argv[2:]:
        stage = os.path.basename(path)[:-len(".xml")] if path.endswith(".xml") else path
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print("slowest-tests: %s: %s" % (path, e), file=sys.stderr)
            continue
        for case in root.iter("testcase"):
            try:
                seconds = float(case.get("time", "0"))
            except ValueError:
                continue
            status = case.get("status", "")
            if case.find("failure") is not None:
                status = "failed"
            elif case.find("skipped") is not None:
                status = "skipped"
            rows.append((seconds, stage, case.get("name", "?"), status))
    rows.sort(key=lambda r: -r[0])
    print("== the %d slowest tests (ctest's own times)" % n)
    for seconds, stage, name, status in rows[:n]:
        print("  %8.1f s  %-12s %s%s" % (seconds, stage, name[:90], "" if status in ("run", "") else " (%s)" % status))


if __name__ == "__main__":
    main()
