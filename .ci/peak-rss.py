"""Run a command and print its peak resident set size in MiB on stderr, last line, as
`peak-rss-mib N` (getrusage of the child). Usage: peak-rss.py CMD [ARG...]; exits as CMD."""
import resource
import subprocess
import sys

rc = subprocess.run(sys.argv[1:]).returncode
kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"peak-rss-mib {kib // 1024}", file=sys.stderr)
sys.exit(rc)
