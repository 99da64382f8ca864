#!/usr/bin/env python3
"""Builds tests/fuzz/corpus/image/ for fuzz_image: the small valid files of tests/data/images
(every PNG colour type and bit depth, JPEG baseline/progressive/gray/CMYK, WebP lossy/lossless/
alpha, EXIF orientations), GIF/BMP/HEIC magic, and truncated and bit-flipped variants of each.
Deterministic. Run from the repository root: /usr/bin/python3 tests/fuzz/make_image_corpus.py
"""
import os, random, shutil

SRC = "tests/data/images"
DST = "tests/fuzz/corpus/image"
MAX_FILE = 6000  # keep the corpus small and each run fast

rnd = random.Random(42)
if os.path.isdir(DST):
    shutil.rmtree(DST)
os.makedirs(DST)


def put(name, data):
    with open(os.path.join(DST, name), "wb") as f:
        f.write(data)


for name in sorted(os.listdir(SRC)):
    path = os.path.join(SRC, name)
    if not os.path.isfile(path) or name.endswith((".py", ".json")):
        continue
    data = open(path, "rb").read()
    if len(data) > MAX_FILE:
        continue
    base = name.replace(".", "_")
    put(base, data)
    if len(data) > 40:
        put(base + ".cut_half", data[: len(data) // 2])
        put(base + ".cut_end", data[: len(data) - 7])
        flipped = bytearray(data)
        for _ in range(4):
            i = rnd.randrange(8, len(data))  # keep the magic so the decoder is reached
            flipped[i] ^= 1 << rnd.randrange(8)
        put(base + ".flip", bytes(flipped))

put("magic_gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")
put("magic_heic", b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic")
put("magic_png_only", b"\x89PNG\r\n\x1a\n")
put("magic_jpeg_only", b"\xff\xd8\xff")
put("magic_webp_only", b"RIFF\x04\x00\x00\x00WEBP")
put("empty", b"")
