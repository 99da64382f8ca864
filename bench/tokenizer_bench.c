/*
 * Tokenizer benchmark: encodes the two 1 MiB fixture texts, checks the ids against the reference,
 * and reports MB/s and tokens/s (best of N runs, wall clock and process CPU time) next to the
 * Hugging Face Rust tokenizer measured on the same machine.
 *
 *   make bench && build/rel/bench/tokenizer_bench [-n RUNS] [tokenizer.json | model.gguf]
 *
 * With --probes PROBES.hex OUT.txt it instead encodes every line of PROBES.hex (a UTF-8 string as
 * hex) and writes the ids, one line per probe: the qvl side of the differential check against the
 * reference (tools/tokenizer_oracle.mjs, docs/TOKENIZER.md).
 *
 * Reference figures (Rust `tokenizers` through its Node binding 0.23.2, the version that produced
 * the fixture ids; one encode() call on the whole file, add_special_tokens=false, best of 3, on this
 * project's 2-core Debian 12 machine): bench_mixed_1MiB 0.905 s (1.16 MB/s, 364k tokens/s),
 * bench_randomwords_1MiB 0.991 s (1.06 MB/s, 523k tokens/s). Measured with
 *   const t = Tokenizer.fromFile("tests/fixtures/tokenizer/tokenizer.json");
 *   await t.encode(text, null, {addSpecialTokens: false});
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/timing.h"
#include "model/gguf.h"
#include "text/tokenizer.h"

/* The tokenizer test reads the same reference files (tests/ holds the reader). */
#include "ids_file.h"

static double cpu_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int run_probes(const tokenizer *t, const char *in_path, const char *out_path) {
  buf in = {0};
  if (buf_read_file(in_path, (size_t)1 << 30, &in) != QVL_OK) {
    fprintf(stderr, "error: %s\n", qvl_last_error());
    return 1;
  }
  FILE *out = fopen(out_path, "w");
  if (!out) {
    perror(out_path);
    return 1;
  }
  char *bytes = malloc(in.len / 2 + 1);
  for (char *line = in.data, *nl; line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    size_t L = nl ? (size_t)(nl - line) : strlen(line), n = 0;
    for (size_t i = 0; i + 1 < L; i += 2) {
      int hi = hexval(line[i]), lo = hexval(line[i + 1]);
      if (hi < 0 || lo < 0)
        break;
      bytes[n++] = (char)(hi << 4 | lo);
    }
    int32_t *ids = NULL;
    size_t m = 0;
    if (tokenizer_encode(t, bytes, n, &ids, &m) != QVL_OK) {
      fprintf(stderr, "error: %s\n", qvl_last_error());
      return 1;
    }
    for (size_t i = 0; i < m; i++)
      fprintf(out, i ? " %d" : "%d", ids[i]);
    fputc('\n', out);
    free(ids);
  }
  free(bytes);
  buf_free(&in);
  return fclose(out) == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  int runs = 10;
  const char *src = "tests/fixtures/tokenizer/tokenizer.json", *probes = NULL, *probes_out = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--probes") == 0 && i + 2 < argc) {
      probes = argv[++i];
      probes_out = argv[++i];
    }
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      printf("usage: %s [-n RUNS] [--probes PROBES.hex OUT.txt] [tokenizer.json | model.gguf]\n", argv[0]);
      return 0;
    } else
      src = argv[i];
  }
  if (runs < 1)
    runs = 1;
  tokenizer *t = NULL;
  double t0 = time_now_s();
  size_t sl = strlen(src);
  if (sl > 5 && strcmp(src + sl - 5, ".gguf") == 0) {
    gguf *g = NULL;
    if (gguf_open(src, &g) != QVL_OK || tokenizer_init_gguf(g, &t) != QVL_OK) {
      fprintf(stderr, "error: %s\n", qvl_last_error());
      gguf_close(g);
      return 1;
    }
    gguf_close(g);
  } else if (tokenizer_init_hf(src, &t) != QVL_OK) {
    fprintf(stderr, "error: %s\n", qvl_last_error());
    return 1;
  }
  printf("tokenizer: %s (%d tokens), loaded in %.3f s\n", src, tokenizer_vocab_size(t), time_now_s() - t0);
  if (probes) {
    int rc = run_probes(t, probes, probes_out);
    tokenizer_free(t);
    return rc;
  }

  static const struct {
    const char *name;
    double ref_s; /* the Rust reference's encode time, see the header */
  } texts[2] = {{"bench_mixed_1MiB", 0.905}, {"bench_randomwords_1MiB", 0.991}};
  int bad = 0;
  for (int k = 0; k < 2; k++) {
    char path[512];
    buf text = {0};
    snprintf(path, sizeof path, "tests/fixtures/tokenizer/%s.txt", texts[k].name);
    if (buf_read_file(path, 64u << 20, &text) != QVL_OK) {
      fprintf(stderr, "error: %s\n", qvl_last_error());
      return 1;
    }
    snprintf(path, sizeof path, "tests/fixtures/tokenizer/%s.ids.txt", texts[k].name);
    size_t n_ref = 0;
    int32_t *ref = read_ids_file(path, &n_ref);
    double best_wall = 1e30, best_cpu = 1e30, best_dec = 1e30;
    size_t n = 0;
    bool match = false;
    for (int r = 0; r < runs; r++) {
      int32_t *ids = NULL;
      double w0 = time_now_s(), c0 = cpu_now_s();
      if (tokenizer_encode(t, text.data, text.len, &ids, &n) != QVL_OK) {
        fprintf(stderr, "error: %s\n", qvl_last_error());
        return 1;
      }
      double wall = time_now_s() - w0, cpu = cpu_now_s() - c0;
      best_wall = wall < best_wall ? wall : best_wall;
      best_cpu = cpu < best_cpu ? cpu : best_cpu;
      match = ref && n == n_ref && memcmp(ids, ref, n * sizeof *ids) == 0;
      buf out = {0};
      double d0 = time_now_s();
      tokenizer_decode(t, ids, n, false, &out);
      double dec = time_now_s() - d0;
      best_dec = dec < best_dec ? dec : best_dec;
      buf_free(&out);
      free(ids);
    }
    double mb = (double)text.len / 1e6;
    printf("%-24s %zu bytes -> %zu tokens, ids %s\n", texts[k].name, text.len, n,
           match ? "match the reference" : "DIFFER FROM THE REFERENCE");
    printf("  encode: best wall %.4f s = %.1f MB/s, %.0f tokens/s; best CPU %.4f s = %.1f MB/s\n", best_wall,
           mb / best_wall, (double)n / best_wall, best_cpu, mb / best_cpu);
    printf("  decode: best wall %.4f s = %.1f MB/s\n", best_dec, mb / best_dec);
    printf("  Rust reference %.3f s (%.2f MB/s): qvl is %.1fx faster (wall)\n", texts[k].ref_s, mb / texts[k].ref_s,
           texts[k].ref_s / best_wall);
    bad += !match;
    free(ref);
    buf_free(&text);
  }
  tokenizer_free(t);
  return bad ? 1 : 0;
}
