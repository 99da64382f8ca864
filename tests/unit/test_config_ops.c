/* Operator settings (issue 13): CPU lists, logfmt -> JSON log lines, nested / transformers-style
 * config files mapped onto the flat keys, and the checks done at parse time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpulist.h"
#include "base/logsink.h"
#include "server/config/settings.h"
#include "server/config/config_files.h"
#include "test.h"

static void test_cpulist(void) {
  cpu_set_t set;
  int cpus[16], n = 0;
  CHECK(cpulist_parse("0-3,8", &set, cpus, 16, &n) == QVL_OK, "0-3,8: %s", qvl_last_error());
  CHECK(n == 5 && cpus[0] == 0 && cpus[3] == 3 && cpus[4] == 8 && CPU_COUNT(&set) == 5, "0-3,8 is 5 CPUs");
  CHECK(cpulist_parse("1", &set, cpus, 16, &n) == QVL_OK && n == 1 && cpus[0] == 1, "a single CPU");
  const char *bad[] = {"", "3-1", "a", "1,", "1-", "0-99999", "1;2", "-1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK(cpulist_parse(bad[i], &set, cpus, 16, &n) == QVL_ERR_INVALID_ARG, "'%s' refused", bad[i]);
  cpulist_set_pinning(NULL, 0);
  CHECK(cpulist_pin_cpu(1) == -1, "no pinning by default");
  int two[] = {4, 6};
  cpulist_set_pinning(two, 2);
  CHECK(cpulist_pin_cpu(0) == 4 && cpulist_pin_cpu(1) == 6 && cpulist_pin_cpu(2) == 4, "one per CPU, round robin");
  cpulist_set_pinning(NULL, 0);
}

static void test_logfmt_json(void) {
  char out[512];
  const char *line = "ts=2026-01-01T00:00:00.000Z level=info msg=request status=200 total_ms=1.5 id=\"a b\" z=007\n";
  logsink_logfmt_to_json(line, strlen(line), out, sizeof out);
  CHECK(!strcmp(out, "{\"ts\":\"2026-01-01T00:00:00.000Z\",\"level\":\"info\",\"msg\":\"request\",\"status\":200,"
                     "\"total_ms\":1.5,\"id\":\"a b\",\"z\":\"007\"}\n"),
        "json line: %s", out);
  logsink_logfmt_to_json("k=\"q\\\"x\"", 8, out, sizeof out);
  CHECK(!strcmp(out, "{\"k\":\"q\\\\\\\"x\"}\n"), "escapes: %s", out);
  char tiny[8];
  logsink_logfmt_to_json(line, strlen(line), tiny, sizeof tiny);
  CHECK(strlen(tiny) < sizeof tiny, "never overflows");
}

/* config_yaml_quote: the one YAML string writer of the config rewriter and --print-config; what it
 * writes must read back as the same text. */
static void test_yaml_quote(void) {
  buf b = {0};
  config_yaml_quote(&b, "plain");
  config_yaml_quote(&b, "a\"b\\c");
  config_yaml_quote(&b, "tab\there\n\x01");
  config_yaml_quote(&b, "");
  buf_append(&b, "", 1);
  CHECK(b.data && !strcmp(b.data, "\"plain\"\"a\\\"b\\\\c\"\"tab\\x09here\\x0a\\x01\"\"\""), "quoted: %s",
        b.data ? b.data : "(null)");
  buf_free(&b);
  /* a quoted value read back by the settings parser is the original text */
  server_config c;
  server_config_init(&c);
  buf y = {0};
  buf_append_str(&y, "alias: ");
  config_yaml_quote(&y, "we\"ird\\name\ttab");
  buf_append_str(&y, "\n");
  CHECK(server_config_apply_yaml(&c, y.data, y.len, "q.yaml") == QVL_OK, "quoted value parses: %s", qvl_last_error());
  CHECK(c.alias && !strcmp(c.alias, "we\"ird\\name\ttab"), "reads back: %s", c.alias ? c.alias : "(null)");
  buf_free(&y);
  server_config_free(&c);
}

static qvl_status yaml(server_config *c, const char *text) {
  return server_config_apply_yaml(c, text, strlen(text), "t.yaml");
}

static void test_nested_yaml(void) {
  server_config c;
  server_config_init(&c);
  const char *seeds = "model:\n  name: Qwen/Qwen3-VL-2B-Instruct\n  torch_dtype: bfloat16\n  device_map: cpu\n"
                      "  offload_folder: null\ngeneration:\n  max_new_tokens: 512\n  context_length: 4096\n"
                      "  use_cache: true\n  cache_type: static\nsystem:\n  cpu_affinity: \"0-3\"\n"
                      "  process_priority: -5\n  swap_size_gb: 4\n";
  CHECK(yaml(&c, seeds) == QVL_OK, "seeds yaml: %s", qvl_last_error());
  CHECK(c.hf && !strcmp(c.hf, "Qwen/Qwen3-VL-2B-Instruct") && !c.model, "model.name -> hf");
  CHECK(c.dtype && !strcmp(c.dtype, "bf16") && c.max_tokens == 512 && c.ctx == 4096, "aliases");
  CHECK(c.cpu_affinity && !strcmp(c.cpu_affinity, "0-3") && c.nice == -5, "system section");
  CHECK(server_config_check(&c) == QVL_OK, "check: %s", qvl_last_error());
  server_config_free(&c);

  server_config_init(&c);
  CHECK(yaml(&c, "system:\n  max_wait_time: 0.25\n  cpu_affinity: [0, 1, 3]\nport: 9000\n") == QVL_OK, "%s",
        qvl_last_error());
  CHECK(c.max_wait_ms == 250 && !strcmp(c.cpu_affinity, "0,1,3") && c.port == 9000, "seconds, lists, flat keys mixed");
  server_config_free(&c);

  struct {
    const char *text, *want;
  } bad[] = {
      {"generation:\n  max_new_tokens: 64\n\n  beam_width: 4\n", "t.yaml:4: unknown setting 'beam_width'"},
      {"model:\n  torch_dtype: int3\n", "t.yaml:2: torch_dtype 'int3'"},
      {"system:\n  max_wait_time: soon\n", "t.yaml:2: max_wait_time expects seconds"},
      {"generation:\n  context_length: 10\n", "t.yaml:2: ctx expects an integer"},
      {"system:\n  nested:\n    x: 1\n", "t.yaml:2: system.nested: expected a value, found a mapping"},
      {"host:\n  x: 1\n", "found a mapping"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    server_config_init(&c);
    qvl_status s = yaml(&c, bad[i].text);
    CHECK(s == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), bad[i].want), "'%s': '%s' lacks '%s'", bad[i].text,
          qvl_last_error(), bad[i].want);
    server_config_free(&c);
  }
}

static void test_checks(void) {
  const char *flags[][3] = {{"--max-batch-size", "100", "[1, 64]"},     {"--history", "sometimes", "error or trim"},
                            {"--log-format", "xml", "logfmt or json"},  {"--cpu-affinity", "x", "cpu list"},
                            {"--max-history-turns", "-2", "[-1, 100000]"}, {"--nice", "-21", "[-20, 19]"}};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    server_config c;
    server_config_init(&c);
    char *argv[] = {"qvl", "serve", "-m", "m.gguf", (char *)flags[i][0], (char *)flags[i][1]};
    qvl_status s = server_config_load(&c, 6, argv, 2, NULL);
    CHECK(s == QVL_ERR_INVALID_ARG && strstr(qvl_last_error(), flags[i][2]), "%s %s: '%s'", flags[i][0], flags[i][1],
          qvl_last_error());
    server_config_free(&c);
  }
  server_config c;
  server_config_init(&c);
  char *ok[] = {"qvl", "serve", "-m", "m.gguf", "--history", "trim", "--max-history-turns", "3", "--cpu-affinity",
                "0-1", "--nice", "5", "--log-format", "json"};
  CHECK(server_config_load(&c, 14, ok, 2, NULL) == QVL_OK, "valid ops flags: %s", qvl_last_error());
  CHECK(!strcmp(c.history, "trim") && c.max_history_turns == 3 && c.nice == 5, "parsed");
  server_config_free(&c);
}

int main(void) {
  test_cpulist();
  test_logfmt_json();
  test_yaml_quote();
  test_nested_yaml();
  test_checks();
  return TEST_SUMMARY("test_config_ops");
}
