"""gguf_vocab_only.py SRC.gguf DST.gguf: a GGUF file holding only SRC's
tokenizer.* metadata (and general.architecture), no tensors: what
`tela-mkmodel --vocab-from` reads, small enough (a few MB, about 1.5 MB
xz-compressed) to travel to a machine that lacks the model it came from
(scripts/serve-bench-gpu.sh). A tool outside the product: the format's
header, key-value pairs and types as GGUF v3 writes them."""
import struct
import sys

if len(sys.argv) != 3:
    sys.exit(__doc__)
src, dst = sys.argv[1], sys.argv[2]
d = open(src, 'rb').read()
off = 0
def rd(fmt):
    global off
    v = struct.unpack_from('<' + fmt, d, off); off += struct.calcsize('<' + fmt); return v[0]
magic = d[:4]; off = 4
ver = rd('I'); n_t = rd('Q'); n_kv = rd('Q')
SZ = {0:1,1:1,2:2,3:2,4:4,5:4,6:4,7:1,10:8,11:8,12:8}
def skip_val(t):
    global off
    if t == 8: n = rd('Q'); off += n
    elif t == 9:
        et = rd('I'); n = rd('Q')
        if et == 8:
            for _ in range(n): m = rd('Q'); off += m
        else: off += SZ[et] * n
    else: off += SZ[t]
keep = []
for _ in range(n_kv):
    s0 = off
    kl = rd('Q'); key = d[off:off+kl].decode(); off += kl
    t = rd('I'); skip_val(t)
    if key.startswith('tokenizer.') or key == 'general.architecture':
        keep.append(d[s0:off])
out = open(dst, 'wb')
out.write(magic + struct.pack('<IQQ', ver, 0, len(keep)))
for k in keep: out.write(k)
out.close()
print(dst, len(keep), 'keys')
