"""Faults at length: the kill -9 write storm with 50 kills, a content root that fills up (a 2 MiB
tmpfs) during writes, and a content root on a read-only mount.

- storm (`support.crash.write_storm`): 4 writers race expected-version PUBLISH against a SIGKILL of
  the `mark-server` process at a random moment, 50 times; after each restart every acknowledged
  version must be served byte for byte and every chain must verify;
- full disk (`reliability.workloads.full_disk`): PUBLISH of ~150 KB documents (new ones, and new
  versions of one) until 20 writes were refused; reads while full; space given back (tmpfs
  resized) and writes again without a restart; then a restart, whose recovery removes what the
  failed writes left, and everything acknowledged checked again;
- read-only root (`reliability.workloads.read_only_root`): the root bind-mounted read-only, with a
  stray temporary recovery cannot remove; the server must start, serve reads and refuse PUBLISH,
  APPEND and ARCHIVE with ``server-error`` ``storage is not writable`` (``not-permitted`` ``server
  is read-only`` with ``--read-only``).

Needs root for the mounts (those parts are reported as skipped otherwise).

    tests/bench/run faults        # or: python tests/bench/bench_faults.py [--kills 50]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import perfkit
from reliability.workloads import full_disk, mount_refusal, read_only_root
from support.crash import write_storm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--refusals", type=int, default=20, help="refused writes on the full disk")
    parser.add_argument("--no-doc", action="store_true", help="do not update PERFORMANCE.md")
    args = parser.parse_args()
    rows: list[list[object]] = []
    failed = False

    started = time.perf_counter()
    storm = asyncio.run(write_storm(Path(tempfile.mkdtemp(prefix="bench-storm-")), args.kills))
    ok = storm.kills == args.kills and not storm.problems
    failed |= not ok
    rows.append(
        [
            f"kill -9 write storm, {storm.kills} kills",
            "PASS" if ok else "FAIL",
            f"{storm.acknowledged:,} versions acknowledged, all served byte for byte after the"
            f" restarts; {storm.unknown} writes cut off with an unknown outcome"
            + (f"; problems: {storm.problems[:5]}" if storm.problems else "")
            + f" ({time.perf_counter() - started:.0f} s)",
        ]
    )
    print(rows[-1], flush=True)

    refusal = mount_refusal()
    if refusal is not None:
        rows.append(["full disk (2 MiB tmpfs)", "SKIPPED", refusal])
        rows.append(["read-only root", "SKIPPED", refusal])
    else:
        base = Path(tempfile.mkdtemp(prefix="bench-disk-"))
        disk = asyncio.run(full_disk(base, size="2m", refusals=args.refusals))
        ok = not disk.problems and set(disk.refusals) == {"insufficient storage"}
        ok = ok and disk.created_after_space_returned == 3 and disk.left_after_restart == 0
        failed |= not ok
        rows.append(
            [
                "full disk (2 MiB tmpfs)",
                "PASS" if ok else "FAIL",
                f"{len(disk.acknowledged)} versions acknowledged, then refusals:"
                f" {perfkit.counts(disk.refusals)}; every acknowledged version served while"
                f" full and after the restart; 3 of 3 writes created once space came back;"
                f" temporaries left by the failed writes: {disk.left_while_running} until the"
                f" restart, {disk.left_after_restart} after"
                + (f"; problems: {disk.problems[:5]}" if disk.problems else ""),
            ]
        )
        print(rows[-1], flush=True)
        problems = asyncio.run(read_only_root(Path(tempfile.mkdtemp(prefix="bench-ro-"))))
        failed |= bool(problems)
        rows.append(
            [
                "read-only root (ro bind mount)",
                "FAIL" if problems else "PASS",
                "started with a stray temporary it could not remove; FETCH ok; PUBLISH, APPEND,"
                " ARCHIVE: `server-error` `storage is not writable`; with `--read-only`:"
                " `not-permitted` `server is read-only`"
                + (f"; problems: {problems}" if problems else ""),
            ]
        )
        print(rows[-1], flush=True)

    text = perfkit.table(["fault", "result", "what was checked"], rows)
    print(text)
    if not args.no_doc:
        notes = """
The storm runs the real `mark-server` process (4 writers, SIGKILL at a random 0.05-0.5 s into
each round). The full disk is a 2 MiB tmpfs as the content root, filled by PUBLISH of ~150 KB
documents, then resized to 64 MiB while the server runs; the read-only root is a bind mount
remounted `ro` (root cannot write through it either). Both run the real server in-process.
"""
        perfkit.write_section("Faults", f"{perfkit.stamp('faults')}\n{notes}\n{text}\n")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
