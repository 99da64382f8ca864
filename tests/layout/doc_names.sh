#!/usr/bin/env bash
# The docs name the real model's files one way, the hub's (Qwen/Qwen3-VL-2B-Instruct-GGUF lists
# Qwen3VL-2B-Instruct-Q8_0.gguf and mmproj-Qwen3VL-2B-Instruct-Q8_0.gguf): no "Qwen3-VL-...gguf"
# spelling, one projector name throughout, and every model id an example shows ("model": "X.gguf",
# in a request or an answer) is the file name of a model the same page serves with -m: the id qvl
# serve answers to, so a request copied from the page is not refused with model_not_found.
set -u
cd "$(dirname "$0")/../.."
pass=0 fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $2"; fi; }
docs=(README.md docs/*.md deploy/k8s/*.yaml)

wrong=$(grep -n 'Qwen3-VL-2B-[A-Za-z0-9_.-]*\.gguf' "${docs[@]}")
check '[ -z "$wrong" ]' "GGUF names not spelt as on the hub (Qwen3VL-2B-...): $wrong"
projectors=$(grep -oh 'mmproj-Qwen3VL-2B-Instruct-[A-Za-z0-9_]*\.gguf' "${docs[@]}" | sort -u)
check '[ "$(printf "%s\n" "$projectors" | grep -c .)" = 1 ]' "more than one projector file name: $(echo $projectors)"
for f in README.md docs/API.md; do
  served=$(grep -o -- '-m [^ ]*\.gguf\|^model: [^ ]*\.gguf' "$f" | sed 's/^-m //; s/^model: //; s:.*/::' | sort -u)
  for id in $(grep -o '"\{0,1\}model"\{0,1\}: *"[^"]*\.gguf"' "$f" | sed 's/.*"\([^"]*\.gguf\)"/\1/' | sort -u); do
    check 'printf "%s\n" "$served" | grep -qxF -- "$id"' "$f: model id '$id' in a request is no file it serves with -m ($(echo $served))"
  done
done
echo "doc-names: $pass passed, $fail failed"
[ $fail -eq 0 ]
