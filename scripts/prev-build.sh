#!/usr/bin/env bash
# prev-build.sh: builds the previous release's holdfastd next to the tree,
# for the lab test that upgrades between two real builds (`upgrade_releases`,
# issue 28) and for `scripts/upgrade-soak.sh`.
#
# The previous release is the last tag reachable from HEAD's parent
# (`git describe --tags --abbrev=0 HEAD^`: at a release tag, the one before
# it), or what HOLDFAST_PREV_RELEASE names (a tag or a commit); with no tag
# in the clone, the commit of v0.1.0 named below. Its tree is exported with
# `git archive` into target/prev/REV/src and built there in a target
# directory of its own (the tree's target/release is never touched), with
# `git describe` of that commit as its version. The binary ends at
# target/prev/holdfastd; target/prev/release names what it is. A build that
# is already there for the same commit is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
# v0.1.0, the first release tag (934b5d4), for a clone without tags.
FIRST_RELEASE=934b5d4c80dddc0fb29d744e439aa3ba0bfb5b81
rev=${HOLDFAST_PREV_RELEASE:-}
if [ -z "$rev" ]; then
  rev=$(git describe --tags --abbrev=0 HEAD^ 2>/dev/null || true)
fi
if [ -z "$rev" ]; then
  rev=$(git rev-parse --verify -q "${FIRST_RELEASE}^{commit}" || true)
fi
if [ -z "$rev" ]; then
  echo "prev-build: no release tag before HEAD and no commit ${FIRST_RELEASE:0:7} in this clone" \
    "(a shallow clone?); set HOLDFAST_PREV_RELEASE to a tag or commit" >&2
  exit 1
fi
commit=$(git rev-parse --verify "${rev}^{commit}")
describe=$(git describe --tags --always "$commit")
out=target/prev
dir=$out/${commit:0:12}
if [ -x "$out/holdfastd" ] && [ "$(cat "$out/release" 2>/dev/null)" = "$describe $commit" ]; then
  echo "prev-build: $describe ($commit) already built at $out/holdfastd"
  exit 0
fi
mkdir -p "$dir"
rm -rf "$dir/src"
mkdir "$dir/src"
git archive "$commit" | tar -x -C "$dir/src"
echo "prev-build: building holdfastd of $describe ($commit) in $dir"
(
  cd "$dir/src"
  HOLDFAST_DESCRIBE=$describe CARGO_TARGET_DIR=../target \
    "${CARGO:-cargo}" build --release --locked --bin holdfastd
)
cp "$dir/target/release/holdfastd" "$out/holdfastd.new"
mv "$out/holdfastd.new" "$out/holdfastd"
echo "$describe $commit" >"$out/release"
echo "prev-build: $("$out/holdfastd" --version) at $out/holdfastd"
