#!/usr/bin/env python3
"""Writes the benchmark images: photo-like gradients with texture, as PNG (no Pillow needed).

    bench/test_images.py OUTDIR WxH [WxH ...]   -> OUTDIR/img_WxH.png

Vision encode time does not depend on pixel values; the texture keeps PNG from compressing the
image to nothing, so decoding costs what a photo's would."""
import struct
import sys
import zlib


def png(w, h):
    rows, s = bytearray(), 12345
    for y in range(h):
        rows.append(0)
        for x in range(w):
            s = (s * 1664525 + 1013904223) & 0xffffffff
            n = s >> 27
            rows += bytes(((x * 255 // w + n) & 255, (y * 255 // h + ((x // 32 + y // 32) & 1) * 40) & 255,
                           ((x + y) * 255 // (w + h)) ^ n))

    def chunk(t, d):
        return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
            chunk(b'IDAT', zlib.compress(bytes(rows), 6)) + chunk(b'IEND', b''))


if __name__ == '__main__':
    for size in sys.argv[2:]:
        w, h = (int(v) for v in size.split('x'))
        with open(f'{sys.argv[1]}/img_{size}.png', 'wb') as f:
            f.write(png(w, h))
