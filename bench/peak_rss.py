#!/usr/bin/python3
# bench/peak_rss.py — runs a command and writes its peak resident memory (MB, the largest of it and its
# children, from getrusage) to a file; the command's output and exit status pass through. Not a profiler.
#   usage: bench/peak_rss.py OUT_FILE COMMAND [ARG]...
import resource, subprocess, sys

rc = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], 'w') as f:
    f.write('%.1f\n' % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0))
sys.exit(rc)
