#!/usr/bin/env bash
# The Markdown tables of the docs are well-formed: every table starts with a header row and a
# delimiter row (|---|) of the same width, and every row has the header's number of cells. A blank
# line inside a table splits it, and the rows after the split form a "table" without a header: that
# fails here, as does a row with a cell too many or too few. Code blocks (``` fences, 4-space
# indents) are skipped. Cells are counted as GitHub does: at every '|' that is not escaped (`\|`),
# inside backquotes too.
set -u
cd "$(dirname "$0")/../.."
pass=0 fail=0
for f in README.md docs/*.md tests/*/README.md; do
  [ -f "$f" ] || continue
  out=$(awk -v file="$f" '
    # cells: the number of cells of a row that starts with "|" (a trailing "|" closes the last one)
    function cells(line,    s, n) {
      s = line
      gsub(/\\\|/, "", s)                 # escaped pipes are content
      sub(/^[ \t]*/, "", s); sub(/[ \t]*$/, "", s)
      n = gsub(/\|/, "|", s)
      return s ~ /\|$/ && length(s) > 1 ? n - 1 : n
    }
    function delimiter(line) { return line ~ /^[ \t]*\|?([ \t]*:?-+:?[ \t]*\|)+([ \t]*:?-+:?[ \t]*)?$/ }
    function close_table() {
      if (rows > 0) {
        if (bad == "") print "ok"
        else print "FAIL " file ":" start ": " bad
      }
      rows = 0; bad = ""
    }
    /^[ \t]*```/ { close_table(); fence = !fence; next }
    fence { next }
    /^    / && rows == 0 { next }         # an indented code block
    /^[ \t]*\|/ {
      rows++
      if (rows == 1) { start = NR; width = cells($0); next }
      if (rows == 2) {
        if (!delimiter($0) && bad == "")
          bad = "no delimiter row under the first row (a table split by a blank line, or rows without a header?)"
        else if (cells($0) != width && bad == "")
          bad = "the delimiter row has " cells($0) " cells, the header " width
        next
      }
      if (cells($0) != width && bad == "")
        bad = "line " NR " has " cells($0) " cells, the header " width
      next
    }
    { close_table() }
    END { close_table() }
  ' "$f")
  while IFS= read -r line; do
    case $line in
      ok) pass=$((pass + 1)) ;;
      FAIL*) fail=$((fail + 1)); echo "$line" ;;
    esac
  done <<<"$out"
done
echo "doc-tables: $pass passed, $fail failed"
[ $fail -eq 0 ]
