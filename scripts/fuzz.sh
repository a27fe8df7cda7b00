#!/usr/bin/env bash
# Runs every fuzz target in the module for the given time (default 15s) each.
set -euo pipefail
t=${1:-15s}
cd "$(git rev-parse --show-toplevel)"
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== $pkg $f ($t)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
  done
done
