#!/usr/bin/env bash
# Fails if a tracked file refers to a path outside the checkout: a user who clones memqos has
# no build-machine folder beside it and none of our machines' absolute paths. Design inputs are
# cited by title and archive link (docs/references.md); the traces ship in traces/.
set -euo pipefail
cd "$(dirname "$0")/.."
# The build machines' sibling folder of seeds and traces (by relative path or by name), and
# their absolute homes (work, root and home directories at the top of the file system).
pattern='\.\./shared|(^|[^A-Za-z0-9_.])shared/(seeds|traces)|(^|[ "'"'"'`(=:])/(work|root|home)/'
# This script names the patterns it looks for; Cargo.lock holds only registry names; the
# agent traces are third-party data kept unchanged (their tool outputs name the recording host).
hits=$(git grep -nIE "$pattern" -- ':!scripts/check-paths.sh' ':!Cargo.lock' ':!traces/agent-haiku' || true)
if [ -n "$hits" ]; then
    echo "check-paths: tracked files refer to paths outside the repository:" >&2
    echo "$hits" | head -20 >&2
    echo "check-paths: cite design inputs by title (docs/references.md), use traces/ for traces, and relative paths elsewhere" >&2
    exit 1
fi
echo "check-paths: no tracked file refers to a path outside the repository"
