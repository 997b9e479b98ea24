#!/usr/bin/env bash
# The testbed's smallest case (docs/testbed.md): two hosts over 100 Mbit/s
# links, brought up under a name of its own and taken down at exit.
#
#   tests/testbed/testbed_check.sh STRATA
#
# Checks that MPI ranks in the hosts' namespaces reach each other over TCP
# only: an allreduce's sums are right and its bus bandwidth stays under the
# shaped rate (shared memory would move GB/s); that `strata run` trains
# there; that `scripts/testbed cluster` writes a cluster file strata loads.
# Exit: 0 passed; 1 failed; 2 usage; 77 skipped (no root or CAP_NET_ADMIN,
# or no mpirun), with one line saying why.
set -uo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: testbed_check.sh STRATA" >&2
  exit 2
fi
strata="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
testbed="$root/scripts/testbed"
why=$("$testbed" check)
if [[ $? -ne 0 ]]; then
  echo "SKIP: $why"
  exit 77
fi
command -v mpirun >/dev/null 2>&1 || {
  echo "SKIP: no mpirun (Open MPI)"
  exit 77
}

name="c$(($$ % 1000000))"
netid=$((100 + $$ % 150))
export STRATA_BIN="$strata"
work="$(mktemp -d)"
cleanup() {
  "$testbed" down --name "$name" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() {
  echo "FAIL: $*"
  exit 1
}

"$testbed" up --hosts 2 --link 100mbit --name "$name" --net-id "$netid" || fail "testbed up"

# 4 MiB allreduce between the two hosts: right sums, and no faster than the
# link allows (100 Mbit/s = 12.5 MB/s; a ring of 2 moves n each way).
json=$("$testbed" mpirun --name "$name" -- "$strata" allreduce -b 4MiB -e 4MiB -n 3 -w 1 \
  --algorithms ring --format json) || fail "strata allreduce across the testbed"
python3 - "$json" <<'PY' || fail "allreduce across the testbed"
import json, sys
d = json.loads(sys.argv[1])
assert d["workers"] == 2 and d["transport"].startswith("mpi"), d
r = d["rows"][0]["ring"]
assert r["wrong"] == 0, f"{r['wrong']} wrong elements"
busbw = r["busbw_GBps"] * 1e9
limit = 100e6 / 8 * 1.1   # the shaped rate, with 10 % for tbf's burst
assert busbw <= limit, f"busbw {busbw / 1e6:.1f} MB/s over the 12.5 MB/s links: not over the testbed"
print(f"allreduce 4 MiB across 2 hosts: busbw {busbw / 1e6:.2f} MB/s (links 12.5 MB/s)")
PY

out=$("$testbed" mpirun --name "$name" -- "$strata" run -n tiny-cnn -s ring --steps 3 -b 4 2>&1) ||
  fail "strata run across the testbed: $out"
grep -q "2 workers (MPI ranks)" <<<"$out" || fail "strata run did not run 2 MPI ranks: $out"

"$testbed" cluster --name "$name" --out "$work/tb.yaml" --largest 1048576 || fail "testbed cluster"
"$strata" predict -n tiny-cnn -c "$work/tb.yaml" -s ring -k 2 -b 4 >/dev/null ||
  fail "strata cannot load the testbed's cluster file"
# The link's table: one row per segment size, the largest segments (256 KiB) at a rate
# under the shaping and not far below it; the unsegmented exchange (one 512 KiB message
# per step) a comment, not a row; the shaper's burst named.
python3 - "$work/tb.yaml" <<'PY' || fail "the testbed's bandwidth table"
import re, sys
text = open(sys.argv[1]).read()
rows = re.findall(r"- \{bytes: (\d+), bandwidth: ([0-9.]+) Mb/s\}", text)
sizes = [int(b) for b, _ in rows]
assert sizes == [4096, 16384, 65536, 262144], f"table sizes {sizes}"
largest = float(rows[-1][1])
assert 20 <= largest <= 110, f"256 KiB messages at {largest} Mb/s on 100 Mbit/s links"
assert re.search(r"# not a row: one message of 524288 B per step", text), "no unsegmented note"
assert re.search(r"# tbf bursts of 131072 B", text), "no burst note"
# The default base (the localhost-cpu preset) has no sharing rows: the file says the
# lanes' overlap over MPI/TCP was not measured, rather than claim it.
assert "overlap over the hosts' MPI/TCP is not measured" in text, "no note of the overlap rows"
assert "overlap_compute_speed" not in text, "overlap figures without sharing rows"
print(f"bandwidth table: {len(rows)} sizes, 256 KiB messages at {largest} Mb/s")
PY
echo "PASS: testbed of 2 hosts at 100mbit: allreduce, run and cluster file"
