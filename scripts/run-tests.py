#!/usr/bin/env python3
"""`make test`'s runner: every test of the workspace, in parallel where
nothing is shared.

    scripts/run-tests.py [-p PACKAGE]... [--phase unit|lab|alone]... [--jobs N] [--lab-jobs N]
                         [--lab-cores C] [--no-beside] [--list] [--no-build]
                         [--extra NAME=CMD]... [FILTER]...

(`--phase alone` selects the EXCLUSIVE tests and ALONE's.)

1. Builds every test target once (`cargo test --release --workspace
   --no-run`), printing cargo's progress with the elapsed time. (Building
   the other targets at nice 19 during the lab phase was tried and is
   slower: the lab phase took 12:00 beside a large rebuild against 7:25,
   more than the ~3 minutes of building first; docs/notes/issue26-perf.md.)
2. Lists each test binary's tests (`BIN --list`, less `--list --ignored`).
   A lab test runs in a process of its own, `BIN --exact NAME --nocapture
   --test-threads=1`; a unit-test binary's tests run in one process, one
   after another (`BIN --test-threads=1 --exact NAME...`, as cargo ran them):
   a process per unit test would cost more than the test. In the package's
   directory (as cargo does), the output in
   target/test-logs/<package>/<kind>-<target>/<test or all>.log.
3. In three phases:
   - `unit`: every test outside the lab binaries, and the `--extra`
     commands (the doc tests, the fuzz targets' build), `--jobs` at a time
     (default: the number of CPUs);
   - `lab`: the lab's scenarios (`holdfast-lab --test lab`, `holdfast-labctl
     --test labctl`), each in namespaces of its own run id (`hf<hex>-...`),
     up to `--lab-jobs` at a time (default 4) and no more than
     `--lab-cores` cores' worth of them (default 0.8 x the CPUs): each
     scenario weighs the CPU seconds over the seconds it took in the last
     run (`CpuGroup`: every process it started, in a cgroup), so the light
     ones, waiting on BGP, BFD and etcd timers, fill in beside a heavy one
     and two heavy ones do not run together; the tests of one SERIAL group
     never run together;
   - `alone`: the EXCLUSIVE and ALONE tests, timing-sensitive or
     CPU-heavy. The EXCLUSIVE ones run one at a time during the lab phase
     (the lane), at PRIORITY times a lab test's CPU weight
     (`CpuGroup.prioritize`: cgroup v1 `cpu.shares`, v2 `cpu.weight`; each
     group with a real-time budget for the BFD threads), the lab scenarios
     getting the cores left; the ALONE ones after the lab phase with
     nothing else running. `--no-beside` (HOLDFAST_TESTS_BESIDE=0), or a
     machine without the cpu controller, runs the EXCLUSIVE ones alone
     too: about 13½ minutes of tests instead of 9½. (The lane was opt-in
     for a while: BFD timers failed in 4 of 8 runs with it, until the
     cause, the lab's 64 MiB tcpdump rings stalling a CPU for ~300 ms each,
     was found; docs/notes/issue26-commands.md.)
   Within a phase the longest first (that fits), by the durations of the
   previous run (target/test-logs/durations.json: seconds and CPU seconds
   per test), else of a committed run (scripts/test-durations.json), else
   by DEFAULT_SECONDS (and half the machine's cores as the weight).
4. Prints a line per finished lab test and per unit-test binary, the
   output of each failure, and a summary; exits 1 if anything failed.

FILTERs (substrings of `<package>/<target>/<test>`, e.g. `nsr_frr::`) run a
subset; `--list` prints the plan without running it. HOLDFAST_TEST_JOBS,
HOLDFAST_LAB_JOBS and HOLDFAST_LAB_CORES set the job counts and the cores too.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "target" / "test-logs"
DURATIONS = LOGS / "durations.json"
# The durations of a whole run on the 2-core machine, committed so that a fresh
# clone's first run starts the long tests first: `cp target/test-logs/durations.json
# scripts/test-durations.json` after a green `make test`.
COMMITTED = ROOT / "scripts" / "test-durations.json"

# Binaries (package, target) whose tests are lab scenarios: real daemons in
# network namespaces, waiting on BGP, BFD and etcd timers.
LAB_BINARIES = {("holdfast-lab", "lab"), ("holdfast-labctl", "labctl")}

# One at a time, beside the lab scenarios at PRIORITY times their CPU weight
# (substrings of `<package>/<target>/<test>`): they load the machine or
# measure timing that other tests would disturb. With `--no-beside`, after
# the lab phase with nothing else running instead. ("Packed" below: beside
# other scenarios at the same weight.)
EXCLUSIVE = [
    # 20 randomized failures on the control-plane lab (frr, bird2, gobgpd,
    # 3 units, etcd, 3 controllers); takeovers judged against BFD 100 ms.
    "holdfast-labctl/labctl/chaos::",
    # The reduced demo: Table 1's five takeovers judged by frr's and bird2's BFD at
    # 100 ms x 3 with the relay on (the relay and the peers' own bfdd must each be
    # scheduled every 300 ms). Packed beside 1.6 cores' worth of others on CI, both
    # peers once saw BFD Down during the host failure (stop 35).
    "holdfast-labctl/labctl/demo_reduced::",
    # The peers' BFD at 100 ms x 3 kept Up by the relay while holdfastd is stopped or
    # taken over: packed, frr once counted a session down during a 2 s SIGSTOP (its
    # bfdd logged control-expired; the relay logged no gap in its cover).
    "holdfast-lab/lab/stall_bfd::",
    "holdfast-lab/lab/nsr_bfd_relay_frr::",
    "holdfast-lab/lab/nsr_bfd_relay_bird::",
    # `holdfast lab`'s four failure kinds on the demo scenario, whose peers run BFD at
    # 100 ms x 3 with the relay (the same exposure as the reduced demo).
    "holdfast-labctl/labctl/lab_command::four_failures_and_takeovers",
    # Non-stop BFD without the relay: the takeover must beat frr's 1.5 s detection
    # time; packed, the second one took 1.38 s to move and 0.62 s to resume.
    "holdfast-lab/lab/nsr_bfd_frr::",
    # 1M routes in with a 3 s hold time: KEEPALIVEs must not wait on the RIB.
    "holdfast-lab/lab/hold_time_load::",
    # 1M routes, BFD transmission under load (a measurement; #[ignore]d).
    "holdfast-lab/lab/bfd_tx_load::",
    # 16 and 8 units on a host, two hosts at once: many holdfastd at once.
    "holdfast-lab/lab/control_plane_scale::",
    # Every failure kind localized within its detection bar (host: 4 s). Packed
    # beside 1.6 cores' worth of others it missed twice: container_network in
    # 3.2 s (bar 0.6 s, stop 25) and a host in 4.18 s (2026-11-29: the
    # controllers' ticks 150-180 ms late, the probers' first miss 665 ms after
    # the controller's own).
    "holdfast-lab/lab/control_plane_localize::",
    # A frozen unit taken over within 1 s of its SIGSTOP (a timing bar): 1.16 s
    # beside 1.6 cores' worth of other scenarios with the plane secure.
    "holdfast-lab/lab/control_plane_hang::",
]

# After the lab phase, with nothing else running at all: what they share,
# CPU priority does not protect.
ALONE = [
    # Every takeover kind at BFD 50 ms x 3 (150 ms detection). In the lane at
    # 8x, frr and bird2 saw BFD Down at the switchover while deb_package
    # started beside it (2026-11-29, a fresh clone's second `make test`).
    "holdfast-labctl/labctl/bfd_50ms::",
    # Finds the namespaces its SIGKILLed `holdfast lab up` left among every
    # namespace new since it started, and expects `down` to remove them: no
    # other lab may start namespaces, or remove stale ones, meanwhile.
    "holdfast-labctl/labctl/lab_command::down_after_a_crashed_up",
    # Upgrades between two builds with frr's and bird2's BFD at 100 ms x 3 and the
    # relay, each during two 100k-route bursts. In the lane at 8x they starved
    # the gobgpd one beside them: its three etcd members, controllers and agents
    # all ran late for 6 s, an agent's lease renewal failed and it fenced the
    # unit it had just been upgraded onto (upgrade-soak run 10, 2026-11-30).
    "holdfast-lab/lab/upgrade_releases::frr_",
    "holdfast-lab/lab/upgrade_releases::bird_",
    # The gobgpd one too: beside it, upgrade_frr's agent b stalled for
    # seconds ("probe discarded: the agent stalled"), its lease was not
    # renewed in time and it fenced the unit, which the controller then
    # moved (a fresh clone's `make test` at d29e059, 2026-11-30).
    "holdfast-lab/lab/upgrade_releases::gobgp_",
]

# An EXCLUSIVE test's CPU weight over a lab scenario's when it runs beside
# them (cgroup v1 `cpu.shares` 1024 x PRIORITY; v2 `cpu.weight` 100 x
# PRIORITY, at most 10000). Not more: while the priority test is busy, a
# lab test waits about PRIORITY scheduler slices (3 ms each) for the CPU,
# and lab tests have timers too. At 64, `bfd_interop` saw holdfastd's BFD
# transmit 393 ms after the one before at a 300 ms interval, beside chaos
# starting its 20 daemons (2026-11-29).
PRIORITY = 8
# Whether every test gets a CPU weight (set by main when the lane runs).
PRIORITIZE = False

# Tests sharing something outside their namespaces run one at a time per group.
SERIAL = {
    # `make deb` (target/debian, cargo's build lock) and the nspawn root
    # /var/cache/holdfast-test/nspawn-root.
    "deb": ["holdfast-lab/lab/deb_package::"],
}

# Expected seconds of the long tests when no run has measured them (from the
# notes in docs/).
DEFAULT_SECONDS = {
    "nsr_gobgp::": 240,
    "nsr_frr::": 80,
    "lab_command::": 200,
    "control_plane_takeover::": 120,
    "deb_package::": 120,
    "control_plane_localize::": 90,
    "etcd_stall::": 150,
    "etcd_quorum_loss::": 90,
    "bmp_pmbmpd::": 60,
    "rpki_stayrtr::": 60,
    "leader_freeze::": 40,
    "nsr_refresh_frr::": 22,
    "nsr_standby_frr::": 22,
    "nsr_bird::": 20,
    "preheated_backup::": 16,
    "extra:": 120,
}

# The times printed count from when `make` started (HOLDFAST_T0, seconds since
# the epoch, set by the Makefile), else from now.
START = float(os.environ.get("HOLDFAST_T0") or time.time())


def stamp():
    s = int(time.time() - START)
    return f"[{s // 60:2d}:{s % 60:02d}]"


def say(msg):
    print(f"{stamp()} {msg}", flush=True)


class Test:
    def __init__(self, pkg, target, kind, exe, cwd, name, argv=None):
        self.pkg, self.target, self.kind = pkg, target, kind
        self.exe, self.cwd, self.name = exe, cwd, name
        self.argv = argv  # an --extra command instead of a test binary
        self.id = f"{pkg}/{target}/{name}" if argv is None else f"extra:{name}"
        self.group = next(
            (g for g, pats in SERIAL.items() if any(p in self.id for p in pats)), None
        )
        self.alone = any(p in self.id for p in ALONE)
        # Timing-sensitive: one at a time, at a priority beside the lab.
        self.exclusive = any(p in self.id for p in EXCLUSIVE)
        self.priority = False  # running at PRIORITY (set by run_phase)
        if self.exclusive or self.alone:
            self.phase = "alone"
        elif (pkg, target) in LAB_BINARIES:
            self.phase = "lab"
        else:
            self.phase = "unit"
        self.members = [name]  # the tests this job runs (a unit-test binary: many)
        self.passed = 0
        self.proc = None
        self.log = None
        self.started = 0.0
        self.seconds = 0.0
        self.cpu = None  # CPU seconds of its processes (CpuGroup, else wait4)
        self.cgroup = None
        self.ok = None

    @property
    def binary(self):
        return f"{self.pkg} ({self.kind} {self.target})" if self.argv is None else self.name

    def log_path(self):
        if self.argv is not None:
            return LOGS / "extra" / f"{self.name}.log"
        safe = "all" if self.name == "*" else self.name.replace("::", ".").replace("/", "_")
        return LOGS / self.pkg / f"{self.kind}-{self.target}" / f"{safe}.log"

    def command(self):
        if self.argv is not None:
            return self.argv
        if self.name == "*":
            return [self.exe, "--test-threads=1", "--exact", *self.members]
        return [self.exe, "--exact", self.name, "--nocapture", "--test-threads=1"]

    def count_passed(self):
        if self.name != "*":
            self.passed = len(self.members) if self.ok else 0
            return
        text = self.log_path().read_text(errors="replace")
        self.passed = sum(1 for n in self.members if f"test {n} ... ok" in text)


def package_names(cargo):
    """manifest path -> package name, for the workspace's members."""
    out = subprocess.run([cargo, "metadata", "--no-deps", "--format-version", "1"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return {p["manifest_path"]: p["name"] for p in json.loads(out.stdout)["packages"]}


def build(cargo, packages):
    """Builds the test targets; returns the test executables from cargo's JSON."""
    select = [a for p in packages for a in ("-p", p)] or ["--workspace"]
    say(f"building the test targets (cargo test --release {' '.join(select)} --no-run)")
    cmd = [cargo, "test", "--release", *select, "--no-run",
           "--message-format=json-render-diagnostics"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    artifacts, packages = [], {}

    def read_stderr():
        for line in proc.stderr:
            line = line.rstrip()
            if line:
                say(f"  {line.strip()}")

    t = threading.Thread(target=read_stderr, daemon=True)
    t.start()
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        manifest = msg["manifest_path"]
        if manifest not in packages:
            packages.update(package_names(cargo))
        artifacts.append({
            "pkg": packages[manifest],
            "target": target["name"],
            "kind": target["kind"][0],
            "exe": msg["executable"],
            "cwd": str(Path(msg["manifest_path"]).parent),
        })
    rc = proc.wait()
    t.join(timeout=5)
    if rc != 0:
        say(f"cargo failed ({rc})")
        sys.exit(rc)
    return artifacts


def list_tests(a):
    def names(extra):
        out = subprocess.run([a["exe"], "--list", "--format", "terse", *extra],
                             cwd=a["cwd"], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"{a['exe']} --list failed: {out.stderr}")
        return [l[: -len(": test")] for l in out.stdout.splitlines() if l.endswith(": test")]

    ignored = set(names(["--ignored"]))
    run = [n for n in names([]) if n not in ignored]
    return run, len(ignored)


def load_durations():
    """{test id: {"s": seconds, "cpu": CPU seconds}} of the committed run, then
    of the last run here (an entry of an older file is a bare number of seconds)."""
    out = {}
    for f in (COMMITTED, DURATIONS):
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for k, v in d.items():
            out[k] = v if isinstance(v, dict) else {"s": v}
    return out


def expected(t, durations):
    if t.id in durations:
        return durations[t.id]["s"]
    return max([s for p, s in DEFAULT_SECONDS.items() if p in t.id] or [1.0])


def weight(t, durations, cores):
    """The cores `t` keeps busy on average (its CPU seconds over its seconds,
    when a run measured them); unmeasured, half the machine."""
    d = durations.get(t.id, {})
    if d.get("cpu") is None or not d.get("s"):
        return cores / 2
    return min(max(d["cpu"] / d["s"], 0.05), cores)


class CpuGroup:
    """A cgroup of one test's processes, for the CPU they use: every process
    the test starts, daemons that detach themselves included (they stay in
    it), as `wait4` would miss. cgroup v1's cpuacct or cgroup v2 (root);
    elsewhere `wait4`'s figure alone."""

    V1 = Path("/sys/fs/cgroup/cpuacct")
    V2 = Path("/sys/fs/cgroup")
    BASE = "holdfast-tests"

    def __init__(self, name):
        self.dir = None
        self.cpu_dir = None  # v1's cpu controller group (`prioritize`)
        for root, usage in ((self.V1, "cpuacct.usage"), (self.V2, "cpu.stat")):
            if (root / usage).exists() and os.access(root, os.W_OK):
                d = root / self.BASE / f"{os.getpid()}-{name}"
                try:
                    d.mkdir(parents=True, exist_ok=True)
                except OSError:
                    continue
                self.dir, self.usage = d, usage
                break

    # cgroup v1's cpu controller, apart from cpuacct on this machine kind
    # (co-mounted elsewhere: then `V1` is the same directory).
    V1_CPU = Path("/sys/fs/cgroup/cpu")

    @classmethod
    def can_prioritize(cls):
        """Whether `prioritize` works here: v1's cpu controller, or v2 with
        the cpu controller enabled for the test groups."""
        if (cls.V1_CPU / "cpu.shares").exists():
            return os.access(cls.V1_CPU, os.W_OK) and (cls.V1 / "cpuacct.usage").exists()
        ctl = cls.V2 / "cgroup.subtree_control"
        return ctl.exists() and "cpu" in ctl.read_text().split()

    def prioritize(self, factor):
        """Gives the group `factor` times the default CPU weight (before its
        processes start). v1: a group of the same name under the cpu
        controller (the cpuacct one is separate here), which `enter` joins
        too; v2: the group's own `cpu.weight`. Every test's group is to get
        one (factor 1 for the others): the weights count among the groups
        of one parent, and a test left at the root would weigh each of its
        processes against the priority test's whole group (2026-11-29:
        bfd_50ms at "64x" beside nsr_gobgp, gobgpd's threads at the root,
        lost BFD at 50 ms x 3 in every takeover)."""
        if self.dir is None:
            return
        if self.usage == "cpuacct.usage" and (self.V1_CPU / "cpu.shares").exists():
            d = self.V1_CPU / self.BASE / self.dir.name
            d.mkdir(parents=True, exist_ok=True)
            (d / "cpu.shares").write_text(str(1024 * factor))
            self.cpu_dir = d
            self.grant_realtime(d)
        elif (self.dir / "cpu.weight").exists():
            (self.dir / "cpu.weight").write_text(str(min(100 * factor, 10000)))

    # Real-time budgets (cgroup v1 with CONFIG_RT_GROUP_SCHED), in µs of
    # each second: the tests' parent group, then each test's group. A new
    # group has none, and the kernel refuses SCHED_FIFO in it, which
    # holdfastd's BFD thread and the relay's sender ask for (`[bfd]
    # realtime_priority`, `--realtime-priority`). A test's threads get at
    # most RT_TEST_US of real-time CPU a second before they are throttled;
    # BFD uses a fraction of a millisecond. Once the parent's budget is
    # spent (more than 9 groups at once), a test's group gets none and its
    # daemons say so and run at normal priority.
    RT_BASE_US = 900_000
    RT_TEST_US = 100_000

    def grant_realtime(self, d):
        mine = d / "cpu.rt_runtime_us"
        base = d.parent / "cpu.rt_runtime_us"
        if not mine.exists():
            return
        try:
            if int(base.read_text()) < self.RT_BASE_US:
                base.write_text(str(self.RT_BASE_US))
        except (OSError, ValueError):
            pass
        try:
            mine.write_text(str(self.RT_TEST_US))
        except OSError:
            pass

    def enter(self):
        """In the child, before exec: into the group."""
        if self.dir is not None:
            (self.dir / "cgroup.procs").write_text(str(os.getpid()))
        if self.cpu_dir is not None:
            (self.cpu_dir / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self):
        """CPU seconds used in the group so far (None: no group)."""
        if self.dir is None:
            return None
        try:
            text = (self.dir / self.usage).read_text()
        except OSError:
            return None
        if self.usage == "cpuacct.usage":
            return int(text) / 1e9
        usec = next((l.split()[1] for l in text.splitlines() if l.startswith("usage_usec")), "0")
        return int(usec) / 1e6

    def remove(self):
        """Removes the group (it stays while a process the test left runs in it)."""
        for d in (self.dir, self.cpu_dir):
            if d is not None:
                try:
                    d.rmdir()
                except OSError:
                    pass

    @classmethod
    def sweep(cls):
        """Removes the empty groups of earlier runs."""
        for root in (cls.V1, cls.V1_CPU, cls.V2):
            base = root / cls.BASE
            for d in base.glob("*") if base.is_dir() else []:
                try:
                    d.rmdir()
                except OSError:
                    pass


def start(t, env, priority=False):
    path = t.log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    t.log = open(path, "w")
    e = dict(env)
    if t.argv is None:
        e["CARGO_MANIFEST_DIR"] = t.cwd
        e["CARGO_PKG_NAME"] = t.pkg
    t.started = time.monotonic()
    t.cgroup = CpuGroup(t.id.replace("/", "_").replace(":", "_"))
    t.priority = priority
    if PRIORITIZE:
        t.cgroup.prioritize(PRIORITY if priority else 1)
    t.proc = subprocess.Popen(t.command(), cwd=t.cwd if t.argv is None else ROOT,
                              stdout=t.log, stderr=subprocess.STDOUT, env=e,
                              start_new_session=True, preexec_fn=t.cgroup.enter)
    RUNNING.add(t)


# Every test running now, in any phase: a SIGTERM or SIGINT to the runner
# (make interrupted) kills their sessions too, which they started apart.
RUNNING = set()


def stop_all(signum, _frame):
    for t in list(RUNNING):
        kill(t)
    say(f"stopped by signal {signum}: {len(RUNNING)} test(s) killed")
    sweep_labs()
    os._exit(128 + signum)


def sweep_labs():
    """Removes what lab tests killed with SIGKILL left (their Drop never ran):
    `holdfast-lab down` with a state file that does not exist runs only the
    harness's `cleanup_stale`, which kills the processes in, and deletes,
    the namespaces of runs whose owning process is gone, and never touches a
    live lab's. Called when the runner starts, after a test killed for its
    timeout, and when the runner is stopped by a signal."""
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    exe = target / "release" / "holdfast-lab"
    if not exe.exists():
        return
    env = dict(os.environ, HOLDFAST_LAB_STATE=str(LOGS / "no-lab-state.json"))
    try:
        out = subprocess.run([str(exe), "down", "--json"], env=env, capture_output=True,
                             text=True, timeout=120)
        removed = json.loads(out.stdout).get("stale_removed", 0) if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        say(f"sweeping stale labs failed: {e}")
        return
    if removed is None:
        say(f"sweeping stale labs failed: {out.stderr.strip()[-300:]}")
    elif removed:
        say(f"removed {removed} namespace(s) of killed lab tests")


def kill(t):
    try:
        os.killpg(t.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def show_failure(t):
    lines = t.log_path().read_text(errors="replace").splitlines()
    tail = lines[-150:]
    print(f"---- {t.id}: last {len(tail)} of {len(lines)} lines of {t.log_path()}")
    for l in tail:
        print(f"    {l}")
    print("----", flush=True)


def reap(t):
    """The exit code of `t`'s process if it ended (None if not), with the CPU
    seconds it and the children it waited for used (`wait4`)."""
    pid, status, ru = os.wait4(t.proc.pid, os.WNOHANG)
    if pid == 0:
        return None
    t.proc.returncode = os.waitstatus_to_exitcode(status)
    t.cpu = ru.ru_utime + ru.ru_stime
    in_group = t.cgroup.seconds()
    if in_group is not None:
        t.cpu = max(t.cpu, in_group)
    return t.proc.returncode


def next_to_start(todo, running, busy, durations, cores):
    """The test to start now, if any: the first of `todo` (longest first)
    outside a busy SERIAL group that fits in `cores` beside `running`. When
    the first such test does not fit, another starts only if it is expected
    to end before the first would fit anyway (EASY backfilling), so light
    tests fill the gaps without pushing a long heavy one to the end."""
    free = [t for t in todo if not t.group or t.group not in busy]
    if not free:
        return None
    if cores is None or not running:
        return free[0]
    w = lambda t: weight(t, durations, cores)
    used = sum(w(r) for r in running)
    head = free[0]
    if used + w(head) <= cores + 1e-9:
        return head
    # When would the head fit: as the running tests end, by their expected durations.
    now = time.monotonic()
    ends = sorted((max(r.started + expected(r, durations), now), w(r)) for r in running)
    shadow = now
    for end, weight_freed in ends:
        used -= weight_freed
        shadow = end
        if used + w(head) <= cores + 1e-9:
            break
    return next((t for t in free[1:]
                 if sum(w(r) for r in running) + w(t) <= cores + 1e-9
                 and now + expected(t, durations) <= shadow), None)


def run_phase(name, tests, jobs, env, durations, timeout, verbose, cores=None, lane=()):
    """Runs `tests` `jobs` at a time, a SERIAL group's tests one at a time.

    With `cores`, also no more at once than the machine has cores for: a test
    starts only while the weights (`weight`) of those running and its own sum
    to at most `cores` (or nothing runs); the longest that fits goes first,
    so light scenarios fill in beside a heavy one.

    `lane`'s tests run beside them, one at a time (the longest first), at
    PRIORITY times the CPU weight; while one runs, `tests` get `cores` less
    its weight (at least a quarter of `cores`)."""
    if not tests and not lane:
        return
    todo = sorted(tests, key=lambda t: -expected(t, durations))
    lane = sorted(lane, key=lambda t: -expected(t, durations))
    load = "" if cores is None else f", {cores:.1f} cores' worth"
    beside = f"; beside them {len(lane)} timing-sensitive ones, one at a time at " \
        f"{PRIORITY}x the CPU weight" if lane else ""
    say(f"phase {name}: {len(todo)} tests, up to {jobs} at a time{load}{beside}")
    running = []
    last_note = time.monotonic()
    deadline = time.monotonic() + timeout * max(1, len(todo) + len(lane))
    while (todo or lane or running) and time.monotonic() < deadline:
        busy = {t.group for t in running if t.group}
        if lane and not any(t.priority for t in running):
            t = lane.pop(0)
            start(t, env, priority=True)
            running.append(t)
            if verbose:
                say(f"start {t.id} (priority)")
        others = [t for t in running if not t.priority]
        left = cores
        if cores is not None:
            first = sum(weight(t, durations, cores) for t in running if t.priority)
            left = max(cores - first, cores / 4)
        while len(others) < jobs:
            t = next_to_start(todo, others, busy, durations, left)
            if t is None:
                break
            todo.remove(t)
            start(t, env)
            running.append(t)
            others.append(t)
            if t.group:
                busy.add(t.group)
            if verbose:
                w = f" (weight {weight(t, durations, cores):.2f})" if cores else ""
                say(f"start {t.id}{w}")
        time.sleep(0.05)
        for t in list(running):
            rc = reap(t)
            late = time.monotonic() - t.started > timeout
            if rc is None and not late:
                continue
            if rc is None:
                kill(t)
                while (rc := reap(t)) is None:
                    time.sleep(0.05)
                t.log.write(f"\n[run-tests] killed after {timeout} s\n")
                sweep_labs()
            t.log.close()
            t.seconds = time.monotonic() - t.started
            t.ok = rc == 0
            t.count_passed()
            running.remove(t)
            kill(t)  # whatever it left in its session
            RUNNING.discard(t)
            t.cgroup.remove()
            if not t.ok:
                say(f"FAIL  {t.id} ({t.seconds:.1f} s)")
                show_failure(t)
            elif verbose:
                say(f"ok    {t.id} ({t.seconds:.1f} s, {t.cpu:.1f} CPU s)")
            if not verbose and t.ok:
                say(f"ok    {t.binary}: {t.passed} passed ({t.seconds:.1f} s)")
        if running and time.monotonic() - last_note > 60:
            last_note = time.monotonic()
            names = ", ".join(f"{t.id} {time.monotonic() - t.started:.0f} s" for t in running)
            say(f"running: {names}")
    for t in running:  # only when the phase's deadline passed
        kill(t)
        t.ok = False
    for t in todo:
        t.ok = False


def unit_jobs_of(tests):
    """The unit tests run a binary at a time (its tests one after another in
    one process, as cargo ran them), the binaries in parallel: a process per
    unit test costs more than the test. --extra commands are jobs of their own."""
    jobs, by_binary = [], {}
    for t in tests:
        if t.argv is not None:
            jobs.append(t)
        elif t.exe in by_binary:
            by_binary[t.exe].members.append(t.name)
        else:
            job = Test(t.pkg, t.target, t.kind, t.exe, t.cwd, "*")
            job.members = [t.name]
            by_binary[t.exe] = job
            jobs.append(job)
    return jobs


def main():
    global PRIORITIZE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int,
                    default=int(os.environ.get("HOLDFAST_TEST_JOBS", os.cpu_count() or 2)))
    ap.add_argument("--lab-jobs", type=int,
                    default=int(os.environ.get("HOLDFAST_LAB_JOBS", 4)),
                    help="at most this many lab scenarios at once (default 4)")
    ap.add_argument("--lab-cores", type=float,
                    default=float(os.environ.get("HOLDFAST_LAB_CORES", 0.8 * (os.cpu_count() or 2))),
                    help="and no more than this many cores' worth of them, by each one's CPU "
                    "seconds in the last run (default: 0.8 x the CPUs; 0: no limit)")
    ap.add_argument("--beside", action=argparse.BooleanOptionalAction,
                    default=os.environ.get("HOLDFAST_TESTS_BESIDE", "1") != "0",
                    help="run the EXCLUSIVE tests beside the lab phase at a CPU priority "
                    "(the default) or, with --no-beside (HOLDFAST_TESTS_BESIDE=0), after it "
                    "with nothing else running")
    ap.add_argument("--timeout", type=int, default=1800,
                    help="seconds one test may take before it is killed")
    ap.add_argument("--list", action="store_true", help="print the plan, run nothing")
    ap.add_argument("--phase", action="append", choices=["unit", "lab", "alone"], default=[],
                    help="run only this phase's tests (default: all three)")
    ap.add_argument("--no-build", action="store_true",
                    help="use the test executables of the last build (target/test-logs/artifacts.json)")
    ap.add_argument("-p", "--package", action="append", default=[],
                    help="only this package's tests (default: the workspace's)")
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=CMD",
                    help="a shell command run in the unit phase, as a test")
    ap.add_argument("filters", nargs="*")
    args = ap.parse_args()
    cargo = os.environ.get("CARGO", "cargo")
    LOGS.mkdir(parents=True, exist_ok=True)
    saved = LOGS / "artifacts.json"
    if args.no_build and saved.exists():
        artifacts = json.loads(saved.read_text())
    else:
        artifacts = build(cargo, args.package)
        saved.write_text(json.dumps(artifacts, indent=1))

    tests, n_ignored = [], 0
    for a in artifacts:
        names, ign = list_tests(a)
        n_ignored += ign
        tests += [Test(a["pkg"], a["target"], a["kind"], a["exe"], a["cwd"], n) for n in names]
    for e in args.extra if not args.phase or "unit" in args.phase else []:
        name, _, cmd = e.partition("=")
        tests.append(Test("extra", name, "extra", None, None, name, ["bash", "-c", cmd]))
    if args.package:  # (with --no-build the saved artifacts are every package's)
        tests = [t for t in tests if t.pkg in args.package or t.argv is not None]
    if args.filters:
        tests = [t for t in tests if any(f in t.id for f in args.filters)]
    if args.phase:
        tests = [t for t in tests if t.phase in args.phase]
    durations = load_durations()
    phases = {p: [t for t in tests if t.phase == p] for p in ("unit", "lab", "alone")}
    phases["unit"] = unit_jobs_of(phases["unit"])
    n_tests = sum(len(t.members) for ts in phases.values() for t in ts)
    say(f"{n_tests} tests in {len(artifacts)} test binaries ({n_ignored} #[ignore]d, not run): "
        + ", ".join(f"{p} {sum(len(t.members) for t in ts)}" for p, ts in phases.items()))
    if args.list:
        for p, ts in phases.items():
            for t in sorted(ts, key=lambda t: -expected(t, durations)):
                tag = f" [serial: {t.group}]" if t.group else ""
                if t.name == "*":
                    tag += f" ({len(t.members)} tests)"
                if p == "lab" and args.lab_cores:
                    tag += f" (weight {weight(t, durations, args.lab_cores):.2f})"
                print(f"{p:5} {expected(t, durations):7.1f} s  {t.id}{tag}")
        return 0

    env = dict(os.environ)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop_all)
    CpuGroup.sweep()
    sweep_labs()
    run_phase("unit", phases["unit"], args.jobs, env, durations, args.timeout, verbose=False)
    lane = []
    if args.beside and CpuGroup.can_prioritize():
        PRIORITIZE = True
        lane = [t for t in phases["alone"] if not t.alone]
    elif args.beside and phases["alone"]:
        say("no CPU controller for a priority: the timing-sensitive tests run alone, after the lab")
    run_phase("lab", phases["lab"], args.lab_jobs, env, durations, args.timeout, verbose=True,
              cores=args.lab_cores or None, lane=lane)
    run_phase("alone", [t for t in phases["alone"] if t not in lane], 1, env, durations,
              args.timeout, verbose=True)

    try:
        measured = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        measured = {}
    jobs = [t for ts in phases.values() for t in ts]
    for t in jobs:
        if t.ok:
            measured[t.id] = {"s": round(t.seconds, 2), "cpu": round(t.cpu or 0.0, 2)}
    DURATIONS.write_text(json.dumps(measured, indent=1, sort_keys=True))
    failed = [t for t in jobs if not t.ok]
    n_passed = sum(t.passed for t in jobs)
    by_phase = ", ".join(
        f"{p} {sum(t.seconds for t in ts):.0f} s of test time" for p, ts in phases.items())
    say(f"{n_passed} passed, {n_tests - n_passed} failed, {n_ignored} ignored ({by_phase})")
    for t in failed:
        print(f"  FAILED {t.id}  (log: {t.log_path()})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
