"""Builds the base of the embedded H200 profile from two calibrations of the same host (a one-off
step, recorded so that the embedded default can be rebuilt; see NOTES.md, "Embedded profile").

  python3 merge_h200_profile.py NEW.json OLD.json OUT.json

NEW: the 2026-12-01 calibration (GPU curves of every kind, the new GPU backend, measured to
x1 = 2048 within its budget; its CPU curves are discarded: the three CPU libraries were timed
interleaved in one process, and OpenBLAS threads left spinning by one library slowed the next
one's calls by up to 100x, a defect of that calibration run since fixed).
OLD: the 2026-11-30 calibration (system libopenblas.so.0, GPU rows up to 6144).

OUT: NEW's machine, copy and start-up figures and GPU curves, each GPU curve extended by OLD's
rows beyond NEW's largest x1 where both grids share their x2 values (same host, same staging
path; the rows are marked in `merged_from`), and OLD's CPU curves, labelled with their library
(`openblas`). The CPU curves of numpy's and scipy's OpenBLAS are then measured with
`offload calibrate --cpu-only OUT.json --library ...` on the host.
"""
import json
import sys


def main(new_path, old_path, out_path):
    new = json.load(open(new_path))
    old = json.load(open(old_path))
    old_gpu = {(c["op"], c["precision"]): c for c in old["curves"] if c["backend"] == "gpu"}
    curves = []
    extended = 0
    for c in new["curves"]:
        if c["backend"] != "gpu":
            continue
        o = old_gpu.get((c["op"], c["precision"]))
        if o and o["x2"] == c["x2"]:
            top = c["x1"][-1]
            extra = [i for i, x in enumerate(o["x1"]) if x > top]
            if extra:
                w = len(c["x2"])
                c = dict(c)
                c["x1"] = c["x1"] + [o["x1"][i] for i in extra]
                c["seconds"] = c["seconds"] + [s for i in extra for s in o["seconds"][i * w:(i + 1) * w]]
                extended += 1
        curves.append(c)
    for c in old["curves"]:
        if c["backend"] == "cpu":
            c = dict(c)
            c["library"] = "openblas"
            curves.append(c)
    out = dict(new)
    out["curves"] = curves
    out["libraries"] = [{"key": "openblas", "path": old["machine"]["cpu_library"]}]
    out["corrections"] = {}
    out.pop("cpu_points", None)
    out["merged_from"] = {
        "gpu": f"{new_path} (created_unix {new['created_unix']}), rows beyond its grid from {old_path} "
               f"(created_unix {old['created_unix']}) in {extended} curves",
        "cpu": f"openblas curves of {old_path}",
    }
    json.dump(out, open(out_path, "w"), indent=2)
    print(f"{len(curves)} curves ({extended} GPU curves extended) -> {out_path}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
