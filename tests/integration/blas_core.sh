#!/usr/bin/env bash
# blas_core.sh: hfl's programs never train on OpenBLAS's Prescott (SSE3)
# kernels on a CPU with AVX2, and never override a user's OPENBLAS_CORETYPE
# (kernels/cpu/blas_core.h: Debian 12's OpenBLAS 0.3.21 falls back to
# Prescott on Intel models it does not know, Emerald Rapids among them).
# The oracle for what the CPU can run is /proc/cpuinfo's flags, read here;
# the kernel set in use is the one hfl-client reports in its device name.
# usage: blas_core.sh HFL_CLIENT
set -u
client=$1
tmp=$(mktemp -d /tmp/hfl-blas-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0

# core_of [ENV...]: the "(OpenBLAS X)" of hfl-client --plan --json's device
core_of() {
  env -u OPENBLAS_CORETYPE "$@" "$client" --plan --model mlp --batch 8 --memory-budget 64M --json \
    --state-dir "$tmp/state" 2>"$tmp/err" | sed -n 's/.*"device":[[:space:]]*"[^"]*(OpenBLAS \([A-Za-z0-9]*\))".*/\1/p'
}
check() { # NAME GOT WANT-TEST
  if [ "$3" = ok ]; then echo "ok   $1: $2"; else echo "FAIL $1: $2"; sed 's/^/  | /' "$tmp/err"; fails=$((fails + 1)); fi
}

flags=$(grep -m1 '^flags' /proc/cpuinfo)
got=$(core_of)
if [ -z "$got" ]; then
  check "no OPENBLAS_CORETYPE" "no kernel set in the device name" fail
elif [[ " $flags " == *" avx2 "* ]]; then
  [ "$got" != Prescott ] && r=ok || r=fail
  check "no OPENBLAS_CORETYPE, AVX2 CPU: not Prescott" "$got" $r
else
  echo "ok   no AVX2 on this CPU: $got is the library's own choice"
fi
got=$(core_of OPENBLAS_CORETYPE=Haswell)
[ "$got" = Haswell ] && r=ok || r=fail
check "OPENBLAS_CORETYPE=Haswell kept" "$got" $r
got=$(core_of OPENBLAS_CORETYPE=Prescott)
[ "$got" = Prescott ] && r=ok || r=fail
check "OPENBLAS_CORETYPE=Prescott kept (the user's choice, even a slow one)" "$got" $r
[ "$fails" -eq 0 ] || exit 1
