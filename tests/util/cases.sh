#!/usr/bin/env bash
# cases.sh: tests check.h's case runner through the fixture test_cases.c, whose
# cases print "ran NAME" and nothing else. The oracle is this script's own list
# of what each command line must run, print and return:
#  - no names: every case, in the table's order, exit 0;
#  - names: those cases alone, in the order given; --list: the names, nothing run;
#  - an unknown name (alone or beside a known one): exit 2, one line on stderr
#    naming it and the known cases, and nothing run;
#  - HFL_TEST_CASE=a,b when no names are given, or when the test passes argc 0;
#    names on the command line win over it;
#  - a failing case: exit 1, and the runner names the case that failed;
#  - a table with two cases of one name: refused with exit 2.
# usage: cases.sh TEST_CASES_BINARY
set -u
bin=$1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run ENV... -- ARGS...: sets rc, out (stdout), err (stderr), ran (the "ran" names, space-separated)
run() {
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local o e
    o=$(mktemp) e=$(mktemp)
    env -u HFL_TEST_CASE "${envs[@]}" "$bin" "$@" >"$o" 2>"$e"
    rc=$?
    out=$(cat "$o") err=$(cat "$e")
    rm -f "$o" "$e"
    ran=$(printf '%s\n' "$out" | sed -n 's/^ran //p' | tr '\n' ' ' | sed 's/ $//')
}

# expect WHAT RC RAN: the last run's exit status and the cases it ran
expect() {
    [ "$rc" = "$2" ] || fail "$1: exit $rc, expected $2 (stderr: $err)"
    [ "$ran" = "$3" ] || fail "$1: ran '$ran', expected '$3'"
}

run -- ; expect "no names" 0 "alpha beta gamma"
case "$out" in *"test_cases: all checks passed") ;; *) fail "no names: no pass line at the end: $out" ;; esac
run -- beta; expect "beta" 0 "beta"
run -- gamma alpha; expect "gamma alpha" 0 "gamma alpha"
run -- --list; expect "--list" 0 ""
[ "$out" = $'alpha\nbeta\ngamma' ] || fail "--list printed '$out'"

run -- nosuch; expect "nosuch" 2 ""
[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] || fail "nosuch: stderr is not one line: $err"
for word in nosuch alpha beta gamma; do
    case "$err" in *"$word"*) ;; *) fail "nosuch: stderr does not name $word: $err" ;; esac
done
run -- beta nosuch; expect "beta nosuch" 2 ""
run -- ALPHA; expect "ALPHA (names are exact)" 2 ""

run HFL_TEST_CASE=beta -- ; expect "HFL_TEST_CASE=beta" 0 "beta"
run HFL_TEST_CASE=gamma,alpha -- ; expect "HFL_TEST_CASE=gamma,alpha" 0 "gamma alpha"
run HFL_TEST_CASE=nosuch -- ; expect "HFL_TEST_CASE=nosuch" 2 ""
run HFL_TEST_CASE=--list -- ; expect "HFL_TEST_CASE=--list" 0 ""
[ "$out" = $'alpha\nbeta\ngamma' ] || fail "HFL_TEST_CASE=--list printed '$out'"
run HFL_TEST_CASE=alpha -- beta; expect "argv over HFL_TEST_CASE" 0 "beta"
run CASES_IGNORE_ARGV=1 HFL_TEST_CASE=gamma -- /some/program/path; expect "argc 0, HFL_TEST_CASE=gamma" 0 "gamma"
run CASES_IGNORE_ARGV=1 -- /some/program/path; expect "argc 0, no names" 0 "alpha beta gamma"

run CASES_FAIL=beta -- ; expect "beta fails" 1 "alpha beta gamma"
case "$err" in *"test_cases/beta: 1 check(s) failed"*) ;; *) fail "beta fails: the runner did not name it: $err" ;; esac
run CASES_FAIL=beta -- alpha gamma; expect "beta fails, not run" 0 "alpha gamma"

run CASES_TABLE=dup -- ; expect "two cases named alpha" 2 ""
case "$err" in *"alpha"*) ;; *) fail "two cases named alpha: not said: $err" ;; esac

if [ $fails -ne 0 ]; then
    echo "cases.sh: $fails failure(s)"
    exit 1
fi
echo "cases.sh: the runner ran, listed and refused as expected"
