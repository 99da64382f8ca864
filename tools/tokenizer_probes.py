#!/usr/bin/env python3
"""Writes probe strings (UTF-8 as hex, one per line) for the differential tokenizer check in
docs/TOKENIZER.md: `codepoints` puts every code point of planes 0-3 and 14 (and a sample of the
others) into contexts that exercise each pre-tokenizer alternative and NFC; `nfc` makes random
runs of bases and combining marks (old, new and Hangul); `random` mixes words, whitespace kinds,
contractions, added-token fragments and scripts.

  python3 tools/tokenizer_probes.py codepoints > /tmp/cp.hex
"""
import random
import sys


def codepoints():
    cps = list(range(0, 0x40000)) + list(range(0xE0000, 0xE0200)) + list(range(0x40000, 0x110000, 997))
    for c in cps:
        if 0xD800 <= c < 0xE000:
            continue
        ch = chr(c)
        yield ("a" + ch + "1" + ch + ch + "x " + ch + "\n'" + ch + "x" + "e" + ch + "\u0301" + ch + "\u0323" +
               "\u1100" + ch + "\u11a8" + ch + ch + "\u0334" + " " + ch + "  " + ch + "!")


NFC_POOL = [0x61, 0x65, 0x6F, 0x41, 0x73, 0x3B1, 0x3C9, 0x419, 0x1100, 0x1161, 0x11A8, 0x11A7, 0xAC00, 0xAC01,
            0xB47, 0xB3E, 0xB57, 0xDD9, 0xDCF, 0xDCA, 0x1025, 0x102E, 0x300, 0x301, 0x302, 0x308, 0x307, 0x323,
            0x327, 0x31B, 0x334, 0x345, 0x344, 0x340, 0x343, 0x5B0, 0x5BC, 0xF71, 0xF72, 0xF80, 0xF73, 0x3099,
            0x304B, 0x1D165, 0x1D16E, 0x1D15F, 0x11099, 0x110BA, 0x11131, 0x11127, 0x11347, 0x1133E, 0x114B9,
            0x114BA, 0x115B8, 0x115AF, 0x1E944, 0x1DF6, 0xD3B, 0x10EFD, 0x897, 0x16D63, 0x16D67, 0x11938, 0x11935,
            0x1E4EC, 0x2126, 0x212B, 0x958, 0x1F71, 0x374, 0xFB1D, 0xCD5, 0xCC6, 0xBCA, 0xBC6, 0xBBE, 0x1B05,
            0x1B35, 0x20, 0x0A, 0x31, 0x4E00, 0xF900, 0x1E0A, 0x212A, 0x415, 0x306, 0x3E, 0x3C, 0x338, 0xE48]


def nfc():
    rnd = random.Random(7)
    for _ in range(150000):
        yield "".join(chr(rnd.choice(NFC_POOL)) for _ in range(rnd.randint(1, 10)))


ATOMS = list("aAzZ019 .,!?'\"-_/\\()[]{}<>|@#$%^&*+=~`;:") + [
    "\t", "\n", "\r", "\r\n", "\u00a0", "\u2028", "\u2029", "\u3000", "\u0085", "\u000b", "\u000c", "\u200b",
    "\u200d", "\ufeff", "\u1680", "\u202f", "\u205f", "\u180e", "'s", "'S", "'t", "'re", "'RE", "'rE", "'ve",
    "'m", "'ll", "'LL", "'lL", "'d", "'\u017f", "'\u017ft", "\u212a", "<|im_start|>", "<|im_end|>",
    "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|im_", "end|>", "<|", "|>", "<|fim_prefix|>",
    "\u0301", "\u0323", "\u0338", "e\u0301", "\u00e9", "\u1100", "\u1161", "\u11a8", "\uac00", "\U0001F600",
    "\U0001F44D\U0001F3FD", "\u4f60\u597d", "\ud55c\uad6d\uc5b4", "\uff83\uff7d\uff84", "\u041f\u0440\u0438",
    "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627", "\u0966\u0967", "\u0661\u0662", "\u00bd",
    "\u00b2", "\u216b", "\u2460", "hello", "world", "The", "  ", "   ", "\n\n", " \n", "\t\t", "123456", "3.14",
    "\u0000", "\u007f", "\ue000", "\U000323b0", "\u0c5c"]


def rand():
    rnd = random.Random(11)
    for _ in range(120000):
        yield "".join(rnd.choice(ATOMS) for _ in range(rnd.randint(1, 14)))


def main():
    modes = {"codepoints": codepoints, "nfc": nfc, "random": rand}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        sys.exit("usage: tokenizer_probes.py codepoints|nfc|random > PROBES.hex")
    out = sys.stdout
    for s in modes[sys.argv[1]]():
        out.write(s.encode("utf-8").hex() + "\n")


if __name__ == "__main__":
    main()
