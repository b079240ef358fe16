#!/usr/bin/env bash
# Seed the decode corpus with the captured packets (../tests/fixtures/*.bin).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/decode
cp ../tests/fixtures/*.bin corpus/decode/
echo "seeded $(ls corpus/decode | wc -l) packets"
