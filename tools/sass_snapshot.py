#!/usr/bin/env python3
"""SASS of every kernel the presets' plans compile, one file per descriptor, to check a refactor leaves
the device code byte-identical (no GPU needed).

  tools/sass_snapshot.py dump OUT_DIR [--chord-jit build/chord-jit]   prewarm every preset x deployment
                                                                      into a scratch cache, write
                                                                      OUT_DIR/<descriptor>.sass
  tools/sass_snapshot.py compare BEFORE_DIR AFTER_DIR [--rename OLD=NEW ...]
                                                                      exit 1 unless every kernel of
                                                                      BEFORE has identical SASS in AFTER

The function's symbol line is dropped (a renamed namespace changes the symbol, not the code); --rename
maps a family renamed between the two snapshots (e.g. mla.decode=sparse_mla.decode). A kernel whose
descriptor has no counterpart in AFTER (families merged or fields renamed) still passes when AFTER holds
a kernel with byte-identical SASS; it is reported as "matched by content".
"""
import argparse
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PRESETS = Path(__file__).with_name("preset_deployments.txt")


def preset_deployments():
    for line in PRESETS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            yield line.split()


def cuobjdump():
    candidates = [os.environ.get("CHORD_CUOBJDUMP"), shutil.which("cuobjdump")]
    candidates += glob.glob("/usr/local/cuda*/bin/cuobjdump")
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += glob.glob(os.path.join(root, "*", "bin", "cuobjdump"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    sys.exit("sass_snapshot: no cuobjdump (tools/setup.sh installs the nvidia-cuda-cuobjdump wheel)")


def descriptor_name(descriptor):
    fields = ",".join(f"{k}={v}" for k, v in sorted(descriptor["fields"].items()))
    return f"{descriptor['family']}[{descriptor['arch']}]{{{fields}}}"


def normalized_sass(text):
    return "\n".join(line for line in text.splitlines() if "Function :" not in line and line.strip()) + "\n"


def dump(out_dir, chord_jit):
    tool = cuobjdump()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, CHORD_CACHE_DIR=cache, CHORD_CACHE_PATH="")
        for model, dep in preset_deployments():
            subprocess.run([chord_jit, "prewarm", "--model", model, "--deployment", dep, "--arch", "sm_90a"],
                           env=env, check=True, stdout=subprocess.DEVNULL)
        count = 0
        for meta_path in sorted(Path(cache).rglob("*.json")):
            meta = json.loads(meta_path.read_text())
            if "descriptor" not in meta:
                continue
            cubin = meta_path.with_suffix(".cubin")
            sass = subprocess.run([tool, "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
            (out / (descriptor_name(meta["descriptor"]) + ".sass")).write_text(normalized_sass(sass))
            count += 1
    print(f"sass_snapshot: {count} kernels -> {out}")


def compare(before_dir, after_dir, renames):
    after = {p.name: p for p in Path(after_dir).glob("*.sass")}
    after_bodies = {q.read_text() for q in after.values()}
    missing, differ, same, by_content = [], [], 0, 0
    for p in sorted(Path(before_dir).glob("*.sass")):
        name = p.name
        for old, new in renames:
            if name.startswith(old + "["):
                name = new + name[len(old):]
        q = after.get(name)
        if q is None and p.read_text() in after_bodies:
            by_content += 1
        elif q is None:
            missing.append(name)
        elif q.read_text() != p.read_text():
            differ.append(name)
        else:
            same += 1
    for n in missing:
        print(f"missing after: {n}")
    for n in differ:
        print(f"SASS differs: {n}")
    print(f"sass_snapshot: {same} identical, {by_content} matched by content, {len(differ)} differ, "
          f"{len(missing)} missing")
    return 0 if not missing and not differ else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out_dir")
    d.add_argument("--chord-jit", default="build/chord-jit")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("--rename", action="append", default=[], help="OLD=NEW family name")
    args = ap.parse_args()
    if args.cmd == "dump":
        dump(args.out_dir, args.chord_jit)
        return 0
    return compare(args.before, args.after, [tuple(r.split("=", 1)) for r in args.rename])


if __name__ == "__main__":
    sys.exit(main())
