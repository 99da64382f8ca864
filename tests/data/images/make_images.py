#!/usr/bin/env python3
"""Generates the extra image test files of tests/unit/test_image.c and their expected RGB, using
Pillow 9.4 (Debian 12 python3-pil) as the oracle: expected = what HF's loader computes,
PIL.Image.open -> ImageOps.exif_transpose -> convert_to_rgb (non-RGB -> RGBA -> composited over
white -> RGB). Expected images are 8-bit RGB PNGs (the plain RGB path of the decoder, which the
shared fixtures check byte for byte).

Run from the repository root: /usr/bin/python3 tests/data/images/make_images.py
It rewrites tests/data/images/ (inputs, expected/*.png, cases.json). Deterministic (fixed seeds).
"""
import io, json, os, random, struct, zlib

from PIL import Image, ImageOps

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)))
cases = {"decode": [], "resize": [], "error": []}


def hf_load(data):
    im = Image.open(io.BytesIO(data))
    im = ImageOps.exif_transpose(im)
    if im.mode != "RGB":
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255))
        im = Image.alpha_composite(bg, rgba).convert("RGB")
    return im


def expected_png(im):
    return save(im, "PNG")


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def add_decode(name, data, note):
    write(name, data)
    im = hf_load(data)
    exp = "expected/" + name.replace(".", "_") + ".png"
    write(exp, expected_png(im))
    cases["decode"].append({"file": name, "expected": exp, "width": im.size[0], "height": im.size[1], "note": note})


def add_error(name, data, status, contains, note, **caps):
    write(name, data)
    cases["error"].append(dict({"file": name, "status": status, "contains": contains, "note": note}, **caps))


def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def raw_png(w, h, depth, ctype, rows, trns=None, plte=None, exif=None, interlace=0, idat=None):
    raw = b"".join(b"\0" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace))
    if plte is not None:
        out += chunk(b"PLTE", plte)
    if trns is not None:
        out += chunk(b"tRNS", trns)
    if exif is not None:
        out += chunk(b"eXIf", exif)
    out += chunk(b"IDAT", zlib.compress(raw) if idat is None else idat) + chunk(b"IEND", b"")
    return out


def pack_bits(vals, depth):
    out, acc, n = bytearray(), 0, 0
    for v in vals:
        acc = (acc << depth) | v
        n += depth
        if n == 8:
            out.append(acc)
            acc, n = 0, 0
    if n:
        out.append(acc << (8 - n))
    return bytes(out)


def exif_bytes(orientation, big_endian=False):
    e = Image.Exif()
    e[0x0112] = orientation
    b = e.tobytes()  # "Exif\0\0" + TIFF (little endian)
    if big_endian:  # same tag written big endian by hand
        b = b"Exif\0\0MM\0*" + struct.pack(">IH", 8, 1) + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + b"\0\0\0\0"
    return b


rnd = random.Random(1234)


def noise(w, h, mode="RGB"):
    n = {"RGB": 3, "RGBA": 4, "L": 1, "LA": 2, "CMYK": 4}[mode]
    return Image.frombytes(mode, (w, h), bytes(rnd.randrange(256) for _ in range(w * h * n)))


def scene(w, h):
    """Smooth gradients plus a few hard edges: compresses well, exercises ringing and clamping."""
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(h):
        for x in range(w):
            v = ((x * 7) ^ (y * 3)) & 0xFF
            px[x, y] = ((x * 255) // max(w - 1, 1), (y * 255) // max(h - 1, 1), 255 if (x // 8 + y // 8) % 2 else v // 4)
    return im


def save(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


# ---- alpha compositing: every (colour, alpha) pair once --------------------------------------
im = Image.new("RGBA", (256, 256))
im.putdata([(c, 255 - c, (c * 37) & 0xFF, a) for a in range(256) for c in range(256)])
add_decode("rgba_all_pairs.png", save(im, "PNG"), "RGBA: all 65536 (value, alpha) pairs over white")
im = Image.new("LA", (256, 256))
im.putdata([(c, a) for a in range(256) for c in range(256)])
add_decode("la_all_pairs.png", save(im, "PNG"), "LA (gray+alpha) 8-bit: all pairs")

# ---- PNG colour types and bit depths (hand-written chunks) -------------------------------------
for depth in (1, 2, 4, 8):
    m = (1 << depth) - 1
    vals = [[(x + y) % (m + 1) for x in range(13)] for y in range(3)]
    rows = [pack_bits(r, depth) for r in vals]
    add_decode("gray%d.png" % depth, raw_png(13, 3, depth, 0, rows), "gray %d-bit" % depth)
    for key in sorted({0, 1, m}):
        add_decode("gray%d_trns%d.png" % (depth, key), raw_png(13, 3, depth, 0, rows, trns=struct.pack(">H", key)),
                   "gray %d-bit, tRNS %d (Pillow compares the raw value with the scaled pixel)" % (depth, key))
    plte = bytes(rnd.randrange(256) for _ in range(3 * min(m + 1, 5)))  # short palette: grey ramp beyond
    add_decode("pal%d.png" % depth, raw_png(13, 3, depth, 3, rows, plte=plte, trns=bytes([0, 128, 255, 7][: min(m + 1, 4)])),
               "palette %d-bit, tRNS, indices past the PLTE end" % depth)
rows16 = [struct.pack(">7H", *[(x * 9000 + y * 77) % 65536 for x in range(7)]) for y in range(3)]
add_decode("gray16.png", raw_png(7, 3, 16, 0, rows16), "gray 16-bit: Pillow mode I, clamped to 255")
add_decode("gray16_trns.png", raw_png(7, 3, 16, 0, rows16, trns=struct.pack(">H", 77)), "gray 16-bit with tRNS")
rows = [bytes(rnd.randrange(256) for _ in range(5 * 6)) for _ in range(4)]
add_decode("rgb16.png", raw_png(5, 4, 16, 2, rows), "RGB 16-bit: high byte")
add_decode("rgb16_trns.png", raw_png(5, 4, 16, 2, rows, trns=rows[0][:6]), "RGB 16-bit with tRNS (ignored: mode RGB)")
rows = [bytes(rnd.randrange(256) for _ in range(5 * 8)) for _ in range(4)]
add_decode("rgba16.png", raw_png(5, 4, 16, 6, rows), "RGBA 16-bit")
add_decode("la16.png", raw_png(10, 4, 16, 4, rows), "LA 16-bit (Pillow RGBA from LA;16B)")
rows = [bytes(rnd.randrange(256) for _ in range(5 * 3)) for _ in range(4)]
add_decode("rgb8_trns.png", raw_png(5, 4, 8, 2, rows, trns=struct.pack(">3H", *rows[1][:3])), "RGB 8-bit with tRNS: ignored")
add_decode("rgb8.png", raw_png(37, 23, 8, 2, [bytes(rnd.randrange(256) for _ in range(37 * 3)) for _ in range(23)]), "RGB 8-bit")
# Adam7: Pillow cannot write it; build the 7 passes by hand
def adam7(w, h, px, ch):
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        xs = list(range(x0, w, dx))
        for y in range(y0, h, dy):
            if xs:
                raw += b"\0" + b"".join(px[(y * w + x) * ch:(y * w + x + 1) * ch] for x in xs)
    return raw
pix = bytes(rnd.randrange(256) for _ in range(37 * 23 * 4))
add_decode("rgba_adam7.png", raw_png(37, 23, 8, 6, [], interlace=1, idat=zlib.compress(adam7(37, 23, pix, 4))), "RGBA Adam7 interlaced")

# ---- EXIF orientation ---------------------------------------------------------------------------
base = scene(6, 4)
for o in range(1, 9):
    add_decode("exif%d.png" % o, save(base, "PNG", exif=exif_bytes(o)), "PNG eXIf orientation %d" % o)
add_decode("exif6_be.png", raw_png(6, 4, 8, 2, [base.tobytes()[y * 18:(y + 1) * 18] for y in range(4)], exif=exif_bytes(6, True)[6:]),
           "PNG eXIf orientation 6, big-endian TIFF without the Exif prefix")
add_decode("exif8.jpg", save(scene(40, 24), "JPEG", quality=90, exif=exif_bytes(8)), "JPEG APP1 orientation 8")
add_decode("exif3.webp", save(scene(20, 12), "WEBP", lossless=True, exif=exif_bytes(3)), "WebP EXIF orientation 3")

# ---- JPEG variants -----------------------------------------------------------------------------
sc = scene(61, 37)
add_decode("q75_420.jpg", save(sc, "JPEG", quality=75), "JPEG 4:2:0")
add_decode("q90_444.jpg", save(sc, "JPEG", quality=90, subsampling=0), "JPEG 4:4:4")
add_decode("q90_422.jpg", save(sc, "JPEG", quality=90, subsampling=1), "JPEG 4:2:2")
add_decode("progressive.jpg", save(sc, "JPEG", quality=80, progressive=True), "progressive JPEG")
add_decode("gray.jpg", save(sc.convert("L"), "JPEG", quality=85), "grayscale JPEG (mode L)")
add_decode("cmyk.jpg", save(noise(17, 9, "CMYK"), "JPEG", quality=95), "CMYK JPEG (Adobe, inverted)")

# ---- WebP --------------------------------------------------------------------------------------
add_decode("lossless.webp", save(sc, "WEBP", lossless=True), "WebP lossless RGB")
add_decode("lossy.webp", save(sc, "WEBP", quality=80), "WebP lossy RGB")
rgba = sc.convert("RGBA")
rgba.putalpha(Image.linear_gradient("L").resize(sc.size))
add_decode("lossless_alpha.webp", save(rgba, "WEBP", lossless=True), "WebP lossless with alpha")
add_decode("lossy_alpha.webp", save(rgba, "WEBP", quality=70), "WebP lossy with alpha")

# ---- Pillow bicubic resize (independent of the fixtures: Pillow itself is the oracle) --------------
src = scene(97, 61)
src.paste(noise(30, 20), (10, 10))
write("resize_src.png", save(src, "PNG"))
for (w, h) in [(32, 32), (64, 96), (160, 96), (97, 32), (33, 61), (200, 8), (1, 1), (3, 250)]:
    exp = "expected/resize_%dx%d.png" % (w, h)
    write(exp, expected_png(src.resize((w, h), Image.BICUBIC)))
    cases["resize"].append({"file": "resize_src.png", "width": w, "height": h, "expected": exp})
big = scene(1000, 700)
big.paste(noise(50, 40), (500, 300))
write("resize_big.png", save(big, "PNG"))
for (w, h) in [(64, 32), (96, 96), (13, 7)]:
    exp = "expected/resize_big_%dx%d.png" % (w, h)
    write(exp, expected_png(big.resize((w, h), Image.BICUBIC)))
    cases["resize"].append({"file": "resize_big.png", "width": w, "height": h, "expected": exp})

# ---- errors ------------------------------------------------------------------------------------
png_ok = save(sc, "PNG")
jpg_ok = save(sc, "JPEG", quality=75)
webp_ok = save(sc, "WEBP", quality=80)
add_error("bomb_20000x20000.png", raw_png(20000, 20000, 1, 0, [], idat=zlib.compress(b"\0" * 100)),
          "ERR_TOO_LARGE", "20000x20000 = 400.0 Mpixel, above the 50.0 Mpixel limit", "header-only decompression bomb")
add_error("truncated.png", png_ok[: len(png_ok) // 2], "ERR_FORMAT", "truncated PNG", "PNG cut in half")
add_error("truncated_header.png", png_ok[:20], "ERR_FORMAT", "PNG", "PNG cut inside IHDR")
add_error("truncated.jpg", jpg_ok[: len(jpg_ok) // 2], "ERR_FORMAT", "truncated JPEG", "JPEG cut in half")
add_error("truncated_header.jpg", jpg_ok[:100], "ERR_FORMAT", "JPEG", "JPEG cut inside the headers")
add_error("truncated.webp", webp_ok[: len(webp_ok) // 2], "ERR_FORMAT", "WebP", "WebP cut in half")
add_error("zero_width.png", raw_png(0, 5, 8, 2, []), "ERR_FORMAT", "PNG", "IHDR width 0")
bad_crc = bytearray(png_ok)
bad_crc[40] ^= 0xFF  # inside the first IDAT
add_error("corrupt_idat.png", bytes(bad_crc), "ERR_FORMAT", "PNG", "IDAT bytes flipped")
add_error("random.bin", bytes(rnd.randrange(256) for _ in range(300)), "ERR_FORMAT", "not a recognised image", "random bytes")
add_error("html.txt", b"<!DOCTYPE html><html><body>404 Not Found</body></html>", "ERR_FORMAT", "HTML", "an error page instead of an image")
add_error("tiny.gif", save(sc.convert("P"), "GIF"), "ERR_UNSUPPORTED", "GIF images are not supported", "GIF")
add_error("tiny.bmp", save(sc, "BMP"), "ERR_UNSUPPORTED", "BMP images are not supported", "BMP")
add_error("pixelcap.png", png_ok, "ERR_TOO_LARGE", "Mpixel limit", "61x37 PNG with max_pixels 1000", max_pixels=1000)
add_error("pixelcap.jpg", jpg_ok, "ERR_TOO_LARGE", "Mpixel limit", "61x37 JPEG with max_pixels 1000", max_pixels=1000)
add_error("pixelcap.webp", webp_ok, "ERR_TOO_LARGE", "Mpixel limit", "61x37 WebP with max_pixels 1000", max_pixels=1000)
add_error("dimcap.png", png_ok, "ERR_TOO_LARGE", "longest side allowed is 40", "61x37 PNG with max_dim 40", max_dim=40)
add_error("bytecap.png", png_ok, "ERR_TOO_LARGE", "MiB limit", "PNG above max_bytes 100", max_bytes=100)

# ---- added later (kept at the end so the files above stay byte-identical) ----------------------
rows = [bytes((x * 7 + y * 40) % 256 for x in range(12)) for y in range(2)]
late = raw_png(4, 2, 8, 2, rows)
late = late[:-12] + chunk(b"eXIf", exif_bytes(6)[6:]) + late[-12:]
add_decode("exif6_after_idat.png", late, "PNG eXIf after IDAT (Pillow reads it when loading)")
rows = [bytes((x * 7 + y) % 256 for x in range(30)) for y in range(20)]
short = raw_png(10, 20, 8, 2, [], idat=zlib.compress(b"".join(b"\0" + r for r in rows)[:300]))
add_error("short_zlib.png", short, "ERR_FORMAT", "Not enough image data",
          "zlib stream ends before the last row (Pillow pads with zeros; we refuse a corrupt file)")
strip = Image.frombytes("RGB", (1, 9), bytes(range(27)))
add_decode("strip_1x9.png", save(strip, "PNG"), "1x9 image")

# Animated WebP: HF (Pillow) takes the first frame.
frames = [noise(23, 17, "RGBA") for _ in range(3)]
add_decode("anim_alpha.webp", save(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True),
           "animated WebP with alpha: first frame")
frames = [noise(23, 17) for _ in range(2)]
add_decode("anim_lossy.webp", save(frames[0], "WEBP", save_all=True, append_images=frames[1:], quality=60),
           "animated lossy WebP: first frame")


def riff_chunk(tag, payload):
    return tag + struct.pack("<I", len(payload)) + payload + (b"\0" if len(payload) & 1 else b"")


def anim_offset(alpha_flag):
    """Hand-built animated WebP whose first frame (6x4) sits at (4, 2) in a 16x10 canvas."""
    still = save(noise(6, 4, "RGBA"), "WEBP", lossless=True)
    vp8l = still[still.index(b"VP8L"):]
    u24 = lambda v: struct.pack("<I", v)[:3]
    vp8x = bytes([0x02 | (0x10 if alpha_flag else 0), 0, 0, 0]) + u24(16 - 1) + u24(10 - 1)
    anmf = u24(4 // 2) + u24(2 // 2) + u24(6 - 1) + u24(4 - 1) + u24(100) + b"\0" + vp8l
    body = b"WEBP" + riff_chunk(b"VP8X", vp8x) + riff_chunk(b"ANIM", b"\0\0\0\0\0\0") + riff_chunk(b"ANMF", anmf)
    return b"RIFF" + struct.pack("<I", len(body)) + body


add_decode("anim_offset_alpha.webp", anim_offset(True),
           "animated WebP, first frame smaller than the canvas, alpha flag: uncovered canvas is white")
add_decode("anim_offset_noalpha.webp", anim_offset(False),
           "same without the VP8X alpha flag: Pillow reads RGBX, uncovered canvas is black")

os.makedirs(os.path.join(OUT, "expected"), exist_ok=True)
with open(os.path.join(OUT, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1)
