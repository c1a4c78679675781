"""How long a `mark` command takes, against a bare aioquic script making the same request.

A real server runs in its own process (pinned to one CPU); each command is a fresh process on the
other CPU, as a user starts it, so every run pays the interpreter, the imports, the handshake and
the close. The rounds interleave the commands in a shuffled order, so a burst of load on the
machine falls on all of them alike, and the medians are compared within the run (hyperfine-style:
a few warm-up runs, then N timed ones). The target (issue 17): a cold `mark fetch` of a small
document takes at most 1.3x the bare script's time.

    PYTHON=.venv/bin/python tests/bench/run cli        # or: bench_cli.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfkit import CLIENT_CPU, child_server, median, pin, stamp, table, write_section

from markproto.server import devcert, seed

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
TARGET = 1.3
PATH = "/index.md"


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run: on a busy machine the wall time
    also holds the waits for a core, the CPU time much less of them."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}: {done.stderr.decode()}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return elapsed, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    pin(CLIENT_CPU)
    work = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    root = work / "root"
    root.mkdir()
    seed.seed(root)
    size = len(seed.WELCOME.encode())
    with child_server(root) as server:
        home = work / "mark-home"
        home.mkdir()
        pin_line = f"127.0.0.1:{server.port} {devcert.fingerprint(server.cert.read_bytes())}\n"
        (home / "known_hosts").write_text(pin_line)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MARK_")}
        env.update(MARK_HOME=str(home), HOME=str(work))
        url = f"mark://127.0.0.1:{server.port}{PATH}"
        python = sys.executable
        bare = [python, str(HERE / "bare_fetch.py"), "127.0.0.1", str(server.port), PATH]
        commands = {
            "python -c pass": [python, "-c", "pass"],
            "mark --version": [str(BIN / "mark"), "--version"],
            "bare aioquic FETCH (baseline)": [*bare, str(server.cert)],
            "mark fetch -no-cache": [str(BIN / "mark"), "fetch", "-no-cache", url],
            "mark fetch (cache revalidated)": [str(BIN / "mark"), "fetch", url],
        }
        samples: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.warmup):
            for command in commands.values():
                timed(command, env)
        names = list(commands)
        for _ in range(args.runs):
            random.shuffle(names)
            for name in names:
                wall, used = timed(commands[name], env)
                samples[name].append(wall)
                cpu[name].append(used)
    baseline = "bare aioquic FETCH (baseline)"
    base, base_cpu = median(samples[baseline]), median(cpu[baseline])
    rows = [
        [
            f"`{name}`",
            f"{median(values) * 1000:.0f}",
            f"{min(values) * 1000:.0f}",
            f"{median(values) / base:.2f}",
            f"{median(cpu[name]) * 1000:.0f}",
            f"{median(cpu[name]) / base_cpu:.2f}",
        ]
        for name, values in samples.items()
    ]
    cold = median(samples["mark fetch -no-cache"]) / base
    verdict = "met" if cold <= TARGET else "MISSED"
    headers = ["command", "median ms", "best ms", "vs baseline", "CPU ms", "CPU vs baseline"]
    text = table(headers, rows)
    print(text)
    print(f"\ncold mark fetch / bare aioquic = {cold:.2f} (target <= {TARGET}: {verdict})")
    load = os.getloadavg()[0]
    write_section(
        "CLI start and fetch",
        f"{stamp('cli')} {args.runs} interleaved runs after {args.warmup} warm-up rounds, each "
        f"command a fresh process on its own CPU, the server (seeded root, `{PATH}` of {size} "
        f"bytes) in another process; 1-minute load average {load:.1f} at the end.\n\n{text}\n\n"
        f"A cold `mark fetch` takes **{cold:.2f}x** the bare aioquic script (target <= {TARGET}: "
        f"{verdict}). CPU ms is the median user + system time of the process, which a busy "
        "machine inflates less than the wall time. The baseline (`tests/bench/bare_fetch.py`) "
        "imports only aioquic, verifies the server against its certificate and closes as "
        "aioquic's `connect` does; `mark` also reads its pins, tokens and cache, and closes at "
        "once (CONNECTION_CLOSE without the 3xPTO wait, which nobody needs once the answer is "
        "in).",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
