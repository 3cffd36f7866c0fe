#!/usr/bin/env python3
"""Nsight Compute DRAM bytes per launch against the simulator's bytes (= the emulator's counts).

Usage: ncu-vs-sim.py NCU_CSV VERIFY_EMU_JSON OUT_CSV
Launches are matched in order (`tandem verify` runs the same launches on both backends); the
kernel names must agree. Bound (stated, DESIGN 6): DRAM reads within 10% + 8 KiB of the
simulated reads. The slack covers 32-byte sector rounding, the parameter and index loads a
cache line serves twice, and ncu's own cache flush; writes are reported, not bounded (an
H200's 60 MB L2 may still hold them when the kernel ends).
"""
import csv
import io
import json
import re
import sys


def ncu_launches(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    rows = csv.DictReader(io.StringIO(text[start:]))
    launches = {}
    for r in rows:
        key = int(r["ID"])
        entry = launches.setdefault(key, {"kernel": r["Kernel Name"]})
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "byte")
        scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6}.get(unit, 1)
        entry[r["Metric Name"]] = value * scale
    return [launches[k] for k in sorted(launches)]


def base_name(kernel):
    return re.split(r"[<(]", kernel.split("::")[-1])[0].strip()


def main():
    ncu, verify, out = sys.argv[1:4]
    sim = [l for case in json.load(open(verify))["cases"] for l in case["launches"]]
    gpu = ncu_launches(ncu)
    if len(gpu) != len(sim):
        print(f"launch counts differ: ncu {len(gpu)}, simulator {len(sim)}")
        return 1
    outside = 0
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "sim_read", "dram_read", "sim_written", "dram_written", "read_ok"])
        for s, g in zip(sim, gpu):
            if base_name(g["kernel"]) != base_name(s["kernel"]):
                print(f"kernel order differs: ncu {g['kernel']}, simulator {s['kernel']}")
                return 1
            read, written = g.get("dram__bytes_read.sum", 0), g.get("dram__bytes_write.sum", 0)
            ok = abs(read - s["read_bytes"]) <= 0.10 * s["read_bytes"] + 8192
            outside += not ok
            w.writerow([s["kernel"], s["read_bytes"], int(read), s["written_bytes"], int(written), ok])
    print(f"{len(sim)} launches; DRAM reads within 10% + 8 KiB of the simulator: "
          f"{len(sim) - outside}/{len(sim)} (table: {out})")
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
