#!/usr/bin/env python3
"""bench/length_bucket/gen_tokens.py — writes a synthetic token classification set for the
length-bucketing benchmark: train.txt and test.txt in glia's token format (a label, then ids).
Not a real corpus: lengths are log-normal like sentences and documents (median ~40, a long tail
up to --max-len), ids uniform over the vocabulary, and class c has its marker id c+1 at a few
random places, so a text CNN learns it. Deterministic for a given --seed.
   usage: gen_tokens.py OUTDIR [--train N] [--test N] [--vocab V] [--classes C] [--max-len L] [--seed S]"""
import argparse, math, os, random

p = argparse.ArgumentParser()
p.add_argument('outdir')
p.add_argument('--train', type=int, default=20000)
p.add_argument('--test', type=int, default=2000)
p.add_argument('--vocab', type=int, default=2000)
p.add_argument('--classes', type=int, default=4)
p.add_argument('--max-len', type=int, default=400)
p.add_argument('--seed', type=int, default=1)
a = p.parse_args()
rng = random.Random(a.seed)
os.makedirs(a.outdir, exist_ok=True)
for name, n in (('train.txt', a.train), ('test.txt', a.test)):
    with open(os.path.join(a.outdir, name), 'w') as f:
        for i in range(n):
            c = rng.randrange(a.classes)
            length = max(4, min(a.max_len, int(math.exp(rng.gauss(math.log(40), 0.8)))))
            ids = [rng.randrange(a.classes + 1, a.vocab) for _ in range(length)]
            for _ in range(1 + length // 50):
                ids[rng.randrange(length)] = c + 1
            f.write('%d %s\n' % (c, ' '.join(map(str, ids))))
