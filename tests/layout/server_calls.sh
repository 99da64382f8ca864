#!/usr/bin/env bash
# No call loops between the server's files (docs/ARCHITECTURE.md, "Server"): from the symbols each
# object of src/server defines and uses (nm), the graph "file A calls a function of file B" must be
# acyclic. Fails naming a loop when two files call each other, directly or round a longer loop.
# BUILD picks the build (default build/rel; run make first); SERVER_OBJ_DIR overrides the folder.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/rel}
dir=${SERVER_OBJ_DIR:-$BUILD/src/server}
fail() { echo "server_calls: $*" >&2; echo "server_calls: 0 passed, 1 failed"; exit 1; }
command -v nm >/dev/null || fail "nm is not installed (binutils)"
mapfile -t objs < <(find "$dir" -name '*.o' 2>/dev/null | sort)
[ ${#objs[@]} -gt 0 ] || fail "no objects under $dir (build first)"
for o in "${objs[@]}"; do
  f=${o#"$dir"/}
  nm "$o" | awk -v f="${f%.o}" 'NF == 3 && $2 ~ /^[TDBR]$/ { print "D", f, $3 } NF == 2 && $1 == "U" { print "U", f, $2 }'
done | awk '
  $1 == "D" { def[$3] = $2; files[$2] = 1; next }
  { use[++nu] = $2 " " $3 }
  END {
    for (i = 1; i <= nu; i++) {
      split(use[i], p, " ")
      if (!(p[2] in def) || def[p[2]] == p[1] || (p[1] SUBSEP def[p[2]]) in seen) continue
      seen[p[1], def[p[2]]] = 1
      adj[p[1]] = adj[p[1]] " " def[p[2]]
      edges++
    }
    pass = 0; failed = 0
    if (edges < 10) { print "server_calls: only " edges " calls between files found: not the server objects?"; failed++ }
    else pass++
    for (f in files) if (!(f in color)) visit(f)
    if (loop != "") { print "server_calls: a call loop between files: " loop; failed++ } else pass++
    print "server_calls: " pass " passed, " failed " failed"
    exit failed > 0
  }
  # depth first; color 1 = on the current path, 2 = done
  function visit(v,   n, k, ws, w) {
    color[v] = 1; path[++depth] = v
    n = split(adj[v], ws, " ")
    for (k = 1; k <= n && loop == ""; k++) {
      w = ws[k]
      if ((w in color) && color[w] == 1) { loop = cycle_from(w) " -> " w }
      else if (!(w in color)) visit(w)
    }
    depth--; color[v] = 2
  }
  function cycle_from(w,   i, s, on) {
    s = ""; on = 0
    for (i = 1; i <= depth; i++) { if (path[i] == w) on = 1; if (on) s = s (s == "" ? "" : " -> ") path[i] }
    return s
  }'
