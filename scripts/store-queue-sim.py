#!/usr/bin/env python3
"""Lists the loads that cannot take their bytes from the store queue, over a traced run.

A load whose bytes lie in stores still in the store queue, but not all in one of them (a wider
load over narrower stores), waits until those stores reach the cache. Right after a commit's
fence no store can leave the queue before the commit's persist is done, so such a load in the
next transaction waits for the previous one's persist (docs/design.md, "Where a transaction
waits for the previous one's persist"). This script finds them, without a PMU:

  1. valgrind --tool=lackey --trace-mem=yes traces every load and store of PROGRAM;
  2. only the part between the first two calls of MARKER (a noinline function the program
     calls around the loop of interest) is kept;
  3. each load is checked against the youngest earlier store that overlaps it among the last
     WINDOW stores; a locked instruction or a fence (from objdump) empties the model queue;
  4. the loads that the youngest overlapping store does not cover are counted by instruction
     and shown with their source lines (addr2line), the most frequent first.

The model is coarse (a real queue drains as stores retire), so read the counts as "where to
look", and a load listed after the commit's locked instruction as harmless for the wait.

  scripts/store-queue-sim.py [--marker NAME] [--window N] [--top N] PROGRAM [ARGS...]

PROGRAM must be built with -g. For example, prog.cpp:

  #include "hashtable.hpp"
  __attribute__((noinline)) void marker(int k) { asm volatile("" :: "r"(k)); }
  int main() {
      tlptm::pool_options o;
      o.durability = tlptm::durability::emulate_pmem;
      o.size = std::size_t{64} << 20;
      auto pool = tlptm::pool::create("/dev/shm/sim.pool", o);
      auto t = tlptm_ht::hashtable<std::uint64_t>::create(pool, 1024);
      for (std::uint64_t k = 1; k <= 1000; ++k) t.insert(k, k);
      pool.prepare_thread();
      marker(1);
      for (std::uint64_t i = 0; i < 1000; ++i)
          t.update_with(i * 7919 % 1000 + 1, [](std::uint64_t v) { return v + 1; });
      marker(2);
      pool.close();
      std::remove("/dev/shm/sim.pool");
  }

  g++ -std=c++20 -O2 -g -DNDEBUG -Iinclude -Iexamples/hashtable prog.cpp -o prog -lpmem -lpthread
  scripts/store-queue-sim.py ./prog

On 2026-12-07 this listed, before the example table's change, a load in update_with's
function (the returned std::optional's flag) once per update; after it, only loads in the
entry's sealing, which come after the commit's locked instruction.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile


def symbol_offset(program, name):
    out = subprocess.run(["nm", "-C", program], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] in "Tt" and parts[2].split("(")[0] == name:
            return int(parts[0], 16)
    sys.exit(f"store-queue-sim: no function {name!r} in {program}")


def drain_offsets(program):
    """Offsets of locked instructions, xchg with memory and fences."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", program], capture_output=True,
                         text=True, check=True).stdout
    drains = set()
    for line in out.splitlines():
        m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if not m:
            continue
        # The mnemonic only: a call to a function with "lock" in its name is no drain.
        mnemonic, operands = m.group(2), m.group(3)
        if mnemonic in ("lock", "sfence", "mfence") or (mnemonic == "xchg" and "(" in operands):
            drains.add(int(m.group(1), 16))
    return drains


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--marker", default="marker", help="function called around the region")
    ap.add_argument("--window", type=int, default=200, help="stores the model queue holds")
    ap.add_argument("--top", type=int, default=20, help="loads to list")
    ap.add_argument("program")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    o = ap.parse_args()

    marker = symbol_offset(o.program, o.marker)
    drains_rel = drain_offsets(o.program)
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace")
        subprocess.run(["valgrind", "--tool=lackey", "--trace-mem=yes", f"--log-file={trace}",
                        o.program, *o.args], check=True)
        # The load bias of the program (valgrind maps position-independent executables at
        # 0x108000): the one at which the marker's first instruction runs.
        bias = None
        with open(trace) as f:
            for line in f:
                if line.startswith("I "):
                    a = int(line[3:].split(",")[0], 16)
                    for b in (0x108000, 0x400000, 0):
                        if a == marker + b:
                            bias = b
                            break
                    if bias is not None:
                        break
        if bias is None:
            sys.exit(f"store-queue-sim: {o.marker} never ran")
        drains = {d + bias for d in drains_rel}
        stores = collections.deque()
        fails = collections.Counter()
        example = {}
        calls = 0
        instr = None
        with open(trace) as f:
            for line in f:
                if line.startswith("I "):
                    instr = int(line[3:].split(",")[0], 16)
                    if instr == marker + bias:
                        calls += 1
                        if calls == 2:
                            break
                    if instr in drains:
                        stores.clear()
                    continue
                if calls != 1 or len(line) < 3 or line[1] not in "LSM":
                    continue
                kind = line[1]
                a, size = line[3:].split(",")
                a, size = int(a, 16), int(size)
                if kind in "LM":
                    for sa, ss, si in reversed(stores):
                        if sa < a + size and a < sa + ss:
                            if not (sa <= a and a + size <= sa + ss):
                                fails[instr] += 1
                                example[instr] = (si, sa, ss, a, size)
                            break
                if kind in "SM":
                    stores.append((a, size, instr))
                    if len(stores) > o.window:
                        stores.popleft()
    if not fails:
        print("no load spans queued stores between the two marker calls")
        return

    def where(addr):
        out = subprocess.run(["addr2line", "-C", "-f", "-i", "-e", o.program, hex(addr - bias)],
                             capture_output=True, text=True).stdout.split("\n")
        pairs = [f"{out[k]} {out[k + 1]}" for k in range(0, len(out) - 1, 2)]
        return " <- ".join(p[:160] for p in pairs[:3])

    for i, n in fails.most_common(o.top):
        si, sa, ss, a, size = example[i]
        print(f"{n:8d}  load {size} B at {a:#x} after a {ss}-byte store at {sa:#x}")
        print(f"          load:  {where(i)}")
        print(f"          store: {where(si)}")


if __name__ == "__main__":
    main()
