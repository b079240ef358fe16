#!/usr/bin/env bash
# Turn the captured fixtures (one hex message per line) into seed corpora.
set -euo pipefail
cd "$(dirname "$0")"
for t in frame decode_message roundtrip decode_open decode_update; do mkdir -p "corpus/$t"; done
n=0
for f in ../tests/fixtures/*.hex; do
    while read -r line; do
        n=$((n + 1))
        for t in frame decode_message roundtrip; do printf '%s' "$line" | xxd -r -p > "corpus/$t/seed$n"; done
        # Header is 19 octets (38 hex digits); the type is the last of them.
        case "${line:36:2}" in
            01) printf '%s' "${line:38}" | xxd -r -p > "corpus/decode_open/seed$n" ;;
            02) printf '%s' "${line:38}" | xxd -r -p > "corpus/decode_update/seed$n" ;;
        esac
    done < "$f"
done
echo "seeded $n messages"
