/* qvl serve settings: defaults, YAML (libyaml), environment, flags and their precedence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/config/settings.h"
#include "fake_env.h"
#include "test.h"

static qvl_status yaml(server_config *c, const char *text) {
  return server_config_apply_yaml(c, text, strlen(text), "t.yaml");
}

static void test_defaults(void) {
  server_config c;
  server_config_init(&c);
  CHECK(!strcmp(c.host, "127.0.0.1") && c.port == 8080, "bind 127.0.0.1:8080 by default");
  CHECK(c.max_batch_size > 0 && c.queue > 0 && c.ctx > c.max_tokens && c.max_body_mb > 0, "sane defaults");
  CHECK(c.n_api_keys == 0 && c.n_allow_image_url == 0, "no keys, no remote images by default");
  CHECK(server_config_check(&c) != QVL_OK && strstr(qvl_last_error(), "-m MODEL.gguf"), "model required: %s",
        qvl_last_error());
  server_config_free(&c);
  server_config_free(NULL);
}

static void test_yaml(void) {
  server_config c;
  server_config_init(&c);
  qvl_status s = yaml(&c, "# comment\nhost: 0.0.0.0\nport: 9000\nmax_batch_size: 4\noffline: true\n"
                          "api_key:\n  - k1\n  - \"k2\"\nallow_image_url: https://img.example.com/\nmodel: m.gguf\n");
  CHECK(s == QVL_OK, "valid yaml: %s", qvl_last_error());
  CHECK(!strcmp(c.host, "0.0.0.0") && c.port == 9000 && c.max_batch_size == 4 && c.offline, "scalars");
  CHECK(c.n_api_keys == 2 && !strcmp(c.api_keys[0], "k1") && !strcmp(c.api_keys[1], "k2"), "list");
  CHECK(c.n_allow_image_url == 1 && !strcmp(c.allow_image_url[0], "https://img.example.com/"), "scalar list");
  CHECK(server_config_check(&c) == QVL_OK, "check: %s", qvl_last_error());
  server_config_free(&c);

  struct {
    const char *text, *want;
  } bad[] = {
      {"port: 80\nbogus_key: 1\n", "t.yaml:2: unknown setting 'bogus_key'"},
      {"port: 80\n\n\nport2: 1\n", "t.yaml:4:"},
      {"port: eighty\n", "t.yaml:1: port expects an integer"},
      {"port: 70000\n", "[0, 65535]"},
      {"offline: maybe\n", "expects true or false"},
      {"host: [a, b]\n", "found a list"},
      {"host:\n  x: 1\n", "found a mapping"},
      {"- a\n- b\n", "a mapping of settings"},
      {"port: \"unterminated\n", "YAML syntax error"},
      {"config: other.yaml\n", "unknown setting 'config'"},
      {"host:\n", "host has no value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    server_config_init(&c);
    s = yaml(&c, bad[i].text);
    CHECK(s == QVL_ERR_INVALID_ARG, "accepted: %s", bad[i].text);
    CHECK(strstr(qvl_last_error(), bad[i].want) != NULL, "'%s': message '%s' lacks '%s'", bad[i].text,
          qvl_last_error(), bad[i].want);
    server_config_free(&c);
  }
  server_config_init(&c);
  CHECK(yaml(&c, "") == QVL_OK && yaml(&c, "# only a comment\n") == QVL_OK, "empty file is fine");
  server_config_free(&c);
}

static void test_precedence(void) {
  char path[] = "/tmp/qvl_test_config_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  const char *text = "port: 1111\nhost: file.host\nqueue: 7\nmax_tokens: 77\napi_key: [filekey]\nmodel: file.gguf\n";
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write");
  close(fd);

  /* file < env < flags */
  const char *env[] = {"QVL_PORT=2222", "QVL_QUEUE=8", "QVL_API_KEY=e1,e2", "QVL_CONFIG=/nonexistent.yaml", NULL};
  fake_env = env;
  char cfgflag[128];
  snprintf(cfgflag, sizeof cfgflag, "--config=%s", path);
  char *argv[] = {"qvl", "serve", cfgflag, "--port", "3333", "--api-key", "f1", "--api-key=f2", "-t", "3", NULL};
  server_config c;
  server_config_init(&c);
  qvl_status s = server_config_load(&c, 10, argv, 2, env_get);
  CHECK(s == QVL_OK, "load: %s", qvl_last_error());
  CHECK(c.port == 3333, "flag beats env and file: %lld", (long long)c.port);
  CHECK(c.queue == 8, "env beats file: %lld", (long long)c.queue);
  CHECK(c.max_tokens == 77 && !strcmp(c.host, "file.host"), "file beats defaults");
  CHECK(c.max_batch_size == 8, "default kept");
  CHECK(c.threads == 3, "short flag -t");
  CHECK(c.n_api_keys == 2 && !strcmp(c.api_keys[0], "f1") && !strcmp(c.api_keys[1], "f2"),
        "flags replace the list (%d keys)", c.n_api_keys);
  CHECK(c.config && !strcmp(c.config, path), "--config beats QVL_CONFIG");
  server_config_free(&c);

  /* env list replaces the file's; QVL_CONFIG picks the file */
  char cfgenv[128];
  snprintf(cfgenv, sizeof cfgenv, "QVL_CONFIG=%s", path);
  const char *env2[] = {"QVL_API_KEY=e1,e2", cfgenv, "QVL_OFFLINE=yes", NULL};
  fake_env = env2;
  char *argv2[] = {"qvl", "serve", NULL};
  server_config_init(&c);
  s = server_config_load(&c, 2, argv2, 2, env_get);
  CHECK(s == QVL_OK, "load 2: %s", qvl_last_error());
  CHECK(c.port == 1111 && c.offline, "QVL_CONFIG read; bool env");
  CHECK(c.n_api_keys == 2 && !strcmp(c.api_keys[0], "e1") && !strcmp(c.api_keys[1], "e2"), "env list");
  server_config_free(&c);

  /* api_key_file adds keys */
  char kpath[] = "/tmp/qvl_test_keys_XXXXXX";
  fd = mkstemp(kpath);
  const char *keys = "# keys\n  kfile1  \n\nkfile2\r\n";
  CHECK(write(fd, keys, strlen(keys)) == (ssize_t)strlen(keys), "write keys");
  close(fd);
  fake_env = NULL;
  char kflag[128];
  snprintf(kflag, sizeof kflag, "--api-key-file=%s", kpath);
  char *argv3[] = {"qvl", "serve", "-m", "x.gguf", kflag, NULL};
  server_config_init(&c);
  s = server_config_load(&c, 5, argv3, 2, env_get);
  CHECK(s == QVL_OK && c.n_api_keys == 2 && !strcmp(c.api_keys[0], "kfile1") && !strcmp(c.api_keys[1], "kfile2"),
        "key file: %d keys (%s)", c.n_api_keys, qvl_last_error());
  server_config_free(&c);
  unlink(kpath);

  /* errors */
  struct {
    int argc;
    char *argv[6];
    const char *want;
  } bad[] = {
      {3, {"qvl", "serve", "--bogus"}, "unknown option '--bogus'"},
      {3, {"qvl", "serve", "--port"}, "--port needs a value"},
      {4, {"qvl", "serve", "--port", "x"}, "--port: port expects an integer"},
      {4, {"qvl", "serve", "--config", "/nonexistent/qvl.yaml"}, "config file"},
      {6, {"qvl", "serve", "-m", "a.gguf", "--hf", "r/x"}, "not both"},
      {5, {"qvl", "serve", "-m", "a", "--allow-image-url=ftp://x/"}, "http:// or https://"},
      {5, {"qvl", "serve", "-m", "a", "--max-tokens=9000"}, "no room for a prompt"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    server_config_init(&c);
    s = server_config_load(&c, bad[i].argc, bad[i].argv, 2, env_get);
    CHECK(s != QVL_OK, "case %zu accepted", i);
    CHECK(strstr(qvl_last_error(), bad[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, qvl_last_error(),
          bad[i].want);
    server_config_free(&c);
  }
  /* a lower --max-pixels lowers the default target with it */
  char *argv4[] = {"qvl", "serve", "-m", "a.gguf", "--max-pixels", "100000", NULL};
  server_config_init(&c);
  s = server_config_load(&c, 6, argv4, 2, env_get);
  CHECK(s == QVL_OK && c.default_max_pixels == 100000, "default follows the cap: %lld",
        (long long)c.default_max_pixels);
  server_config_free(&c);
  unlink(path);
}

static void test_usage(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  server_config_usage(f);
  fclose(f);
  CHECK(text && strstr(text, "--max-batch-size N") && strstr(text, "QVL_MAX_BATCH_SIZE") &&
            strstr(text, "-m, --model VALUE") && strstr(text, "(default 8080)"),
        "usage text");
  free(text);
}

int main(void) {
  test_defaults();
  test_yaml();
  test_precedence();
  test_usage();
  return TEST_SUMMARY("server_config");
}
