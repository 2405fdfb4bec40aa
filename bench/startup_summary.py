#!/usr/bin/env python3
# bench/startup_summary.py — where a GPU run's start went, from glia's debug log (GLIA_LOG_LEVEL=debug): the cuDNN
# graph builds of conv2d (plans made, fused, compiled at run time, their time), the autotuner's timing (legacy
# algorithms and graph plans), the pointwise kernels compiled, the scratch's growth, and the log's epoch and `real`
# lines. Not a timing of its own: it sums what the log says.
#   usage: bench/startup_summary.py LOG
import re
import sys

text = open(sys.argv[1], errors="replace").read()
builds = [(int(p), int(f), int(c), float(ms)) for p, f, c, ms in re.findall(
    r"(\d+) graph plans? \((\d+) fused, (\d+) compiled at run time\) built in ([0-9.]+) ms", text)]
t = sum(b[3] for b in builds)
print("cuDNN graph builds: %d, %.2f s in all (largest %.2f s); %d plans, %d fused, %d compiled at run time"
      % (len(builds), t / 1e3, max((b[3] for b in builds), default=0) / 1e3, sum(b[0] for b in builds),
         sum(b[1] for b in builds), sum(b[2] for b in builds)))
timed = [(int(n), float(a), int(m), float(b)) for n, a, m, b in re.findall(
    r"timed (\d+) legacy algorithms? in ([0-9.]+) ms and (\d+) graph plans? in ([0-9.]+) ms", text)]
print("autotuner timing: %d shapes and directions; legacy %d algorithms in %.2f s, graph %d plans in %.2f s"
      % (len(timed), sum(x[0] for x in timed), sum(x[1] for x in timed) / 1e3, sum(x[2] for x in timed),
         sum(x[3] for x in timed) / 1e3))
jit = [float(m) for m in re.findall(r"kernels ready in ([0-9.]+) ms", text)]
print("pointwise kernels: %d layers, %.2f s in all (largest %.2f s)" % (len(jit), sum(jit) / 1e3, max(jit, default=0) / 1e3))
grows = [float(m) for m in re.findall(r"scratch grows from [0-9.]+ MB to ([0-9.]+) MB", text)]
print("scratch: grew %d times, largest %.1f MB" % (len(grows), max(grows, default=0)))
chosen = re.findall(r"conv2d (forward|backward data|backward filter): cuDNN \w+ chose .*?(run through its graph API's "
                    r"(?:fused )?plan instead)?(?= for input)", text)
if chosen:
    print("conv2d choices: %d, %d of them graph plans" % (len(chosen), sum(1 for c in chosen if c[1])))
for line in text.splitlines():
    if line.startswith("real ") or "epoch" in line and "seconds" in line:
        print(line[:200])
