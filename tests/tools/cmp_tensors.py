#!/usr/bin/env python3
"""cmp_tensors.py: compare one F32 tensor of two safetensors files.

    cmp_tensors.py GOT.safetensors WANT.safetensors NAME [--max-rel 1e-4] [--exact]

Prints "max_abs=... max_ref=... rel=... argmax_agree=a/b" and exits 0 when
max|got - want| / max|want| <= max-rel (or, with --exact, when the bytes are identical),
1 otherwise, 2 on unreadable input. Standard library only (CI has no numpy)."""
import array
import json
import struct
import sys


def read_tensor(path, name):
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
        meta = header[name]
        if meta["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {meta['dtype']}, expected F32")
        begin, end = meta["data_offsets"]
        f.seek(8 + hlen + begin)
        raw = f.read(end - begin)
    values = array.array("f")
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    return meta["shape"], values, raw


def main():
    args = sys.argv[1:]
    max_rel, exact = 1e-4, False
    if "--exact" in args:
        exact = True
        args.remove("--exact")
    if "--max-rel" in args:
        i = args.index("--max-rel")
        max_rel = float(args[i + 1])
        del args[i : i + 2]
    if len(args) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        gshape, got, graw = read_tensor(args[0], args[2])
        wshape, want, wraw = read_tensor(args[1], args[2])
    except (OSError, KeyError, ValueError) as e:
        print(f"cmp_tensors: {e}", file=sys.stderr)
        return 2
    if gshape != wshape:
        print(f"shape {gshape} != {wshape}")
        return 1
    if exact:
        print("identical" if graw == wraw else "bytes differ")
        return 0 if graw == wraw else 1
    max_abs = max(abs(a - b) for a, b in zip(got, want))
    max_ref = max(abs(b) for b in want)
    rel = max_abs / max_ref if max_ref > 0 else max_abs
    # next-token agreement per row (last dim is the vocabulary)
    v = wshape[-1]
    rows = len(want) // v
    agree = 0
    for r in range(rows):
        g = got[r * v : (r + 1) * v]
        w = want[r * v : (r + 1) * v]
        agree += g.index(max(g)) == w.index(max(w))
    print(f"max_abs={max_abs:.3g} max_ref={max_ref:.3g} rel={rel:.3g} argmax_agree={agree}/{rows}")
    return 0 if rel <= max_rel else 1


if __name__ == "__main__":
    sys.exit(main())
