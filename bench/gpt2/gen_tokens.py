#!/usr/bin/python3
# bench/gpt2/gen_tokens.py — llm.c token files (a 256 x int32 header: magic 20240520, version 1, token count; then
# uint16 tokens) from the bytes of text files, each byte a token (ids 0..255 of GPT-2's 50304): small real-text
# data both sides of bench/gpt2/run.sh train on, for machines without the FineWeb shards. Not a GPT-2 tokenizer.
#   usage: gen_tokens.py OUT_DIR [FILE...]   (default files: Debian's fortunes, /usr/share/games/fortunes/*.u8)
import glob
import struct
import sys
from array import array


def write(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        a = array("H", list(tokens))
        if sys.byteorder != "little":
            a.byteswap()
        f.write(a.tobytes())


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: gen_tokens.py OUT_DIR [FILE...]")
    files = sys.argv[2:] or sorted(glob.glob("/usr/share/games/fortunes/*.u8"))
    data = b"".join(open(f, "rb").read() for f in files)
    if len(data) < 1 << 16:
        sys.exit("gen_tokens.py: %d bytes of text; at least 65536 wanted" % len(data))
    cut = len(data) - len(data) // 10  # the last tenth for validation, as llm.c keeps a separate val shard
    write(sys.argv[1] + "/tokens_train_000001.bin", data[:cut])
    write(sys.argv[1] + "/tokens_val_000000.bin", data[cut:])
    print("%d training and %d validation tokens from %d files into %s" % (cut, len(data) - cut, len(files),
                                                                          sys.argv[1]))


if __name__ == "__main__":
    main()
