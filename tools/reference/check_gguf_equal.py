#!/usr/bin/env python3
"""check_gguf_equal.py: checks that two GGUF files hold the same tensor
values after dequantization (pure Python, no numpy): same tensor names and
shapes, and every value equal exactly. Types may differ (F32, F16, BF16, Q8_0).

build_fixtures.sh uses it to check tela's Q8_0 file against an F32 file of
the checkpoint make_refs.py dequantized itself: equality means tela quantized
exactly the tensors the reference assumed, exactly as ggml's reference Q8_0.

Usage: check_gguf_equal.py A.gguf B.gguf
"""
import struct
import sys

SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, data):
        self.d = data
        self.p = 0

    def take(self, fmt):
        n = struct.calcsize("<" + fmt)
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += n
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.d[self.p:self.p + n].decode("utf-8", "replace")
        self.p += n
        return s

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et = self.take("I")
            n = self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {t}")


def load(path):
    data = open(path, "rb").read()
    r = Reader(data)
    if r.take("4s") != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    r.take("I")
    n_t = r.take("Q")
    n_kv = r.take("Q")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take("I"))
    tensors = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        tensors.append((name, ne, r.take("I"), r.take("Q")))
    align = kv.get("general.alignment", 32)
    base = (r.p + align - 1) // align * align
    return data, kv, tensors, base


def values(data, base, ne, typ, off):
    n = 1
    for x in ne:
        n *= x
    p = base + off
    if typ == 0:
        return list(struct.unpack_from(f"<{n}f", data, p))
    if typ == 1:
        return list(struct.unpack_from(f"<{n}e", data, p))
    if typ == 30:
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack_from(f"<{n}H", data, p)]
    if typ == 8:
        out = []
        for b in range(n // 32):
            d = struct.unpack_from("<e", data, p + b * 34)[0]
            qs = struct.unpack_from("<32b", data, p + b * 34 + 2)
            out.extend(d * q for q in qs)   # exact: f16 scale times int8 fits a double
        return out
    raise SystemExit(f"type {typ} not handled")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    a = load(sys.argv[1])
    b = load(sys.argv[2])
    tb = {t[0]: t for t in b[2]}
    if sorted(t[0] for t in a[2]) != sorted(tb):
        raise SystemExit("tensor names differ")
    bad = 0
    types = {}
    for name, ne, typ, off in a[2]:
        _, ne2, typ2, off2 = tb[name]
        types[typ] = types.get(typ, 0) + 1
        if ne != ne2:
            print(f"{name}: shape {ne} vs {ne2}")
            bad += 1
            continue
        va = values(a[0], a[3], ne, typ, off)
        vb = values(b[0], b[3], ne2, typ2, off2)
        diff = sum(1 for x, y in zip(va, vb) if x != y)
        if diff:
            print(f"{name}: {diff} of {len(va)} values differ (types {typ} vs {typ2})")
            bad += 1
    print(f"{len(a[2])} tensors compared (types in {sys.argv[1]}: {types}); {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
