# qvl — build with `make`, test with `make test`.
# Build modes: `make SAN=1` (ASan+UBSan, in build/san), `make TSAN=1` (ThreadSanitizer, in
# build/tsan), `make CC=clang`.

CC ?= cc
comma := ,
# `make V=1` shows full command lines.
Q := $(if $(filter 1,$(V)),,@)
say = $(if $(filter 1,$(V)),,@printf '  %-6s %s\n' $(1) $(2))
SAN ?= 0
TSAN ?= 0
BUILD ?= build/$(if $(filter 1,$(TSAN)),tsan,$(if $(filter 1,$(SAN)),san,rel))$(if $(filter clang,$(notdir $(CC))),-clang,)

# libqvl (the model, the engine, the C API) links only LIB_PKGS; the service (server, commands, hub
# downloads) adds SVC_PKGS in its own archive; the command line adds APP_PKGS (docs/ARCHITECTURE.md).
# FFmpeg's libraries are the library's: the engine decodes the videos of a request (src/video/).
# zlib is only the tests' (tests/mkv_write.h compresses Matroska frames).
LIB_PKGS := libjpeg libpng libwebp libcjson libcrypto libxxhash libavformat libavcodec libswscale libavutil
SVC_PKGS := libcurl libmicrohttpd yaml-0.1 sqlite3
APP_PKGS := libedit
TEST_PKGS := zlib
PKGS := $(LIB_PKGS) $(SVC_PKGS) $(APP_PKGS) $(TEST_PKGS)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LIB_PKG_LIBS := $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter -Werror
SAN_FLAGS := -fsanitize=address$(comma)undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
OPT := $(if $(filter 1,$(TSAN)),-O1 -fsanitize=thread,$(if $(filter 1,$(SAN)),-O1 $(SAN_FLAGS),-O2))
# Programs on the public API (apps/, examples/) see include/ only; the library, its tests and the
# benchmarks see src/ too. Library objects export only what include/ marks QVL_API.
CFLAGS_PUB := -std=c11 -g $(OPT) $(WARN) -D_GNU_SOURCE -Iinclude -pthread -MMD -MP $(PKG_CFLAGS) $(CFLAGS)
CFLAGS_ALL := $(CFLAGS_PUB) -Isrc
CFLAGS_LIB := $(CFLAGS_ALL) -fvisibility=hidden -fPIC
LDFLAGS_ALL := $(if $(filter 1,$(SAN)),-fsanitize=address$(comma)undefined,) $(if $(filter 1,$(TSAN)),-fsanitize=thread,) -pthread $(LDFLAGS)
LIBS := $(PKG_LIBS) -lm
LIB_LIBS := $(LIB_PKG_LIBS) -lm

# Each ISA file is compiled with only its own -m flags (see src/kernels/kernels.h).
ISA_FLAGS_avx2 := -mavx2 -mfma -mf16c
ISA_FLAGS_avx2_attn := $(ISA_FLAGS_avx2)
ISA_FLAGS_avx2_vnni := $(ISA_FLAGS_avx2) -mavxvnni
ISA_FLAGS_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c
ISA_FLAGS_avx512_bf16 := $(ISA_FLAGS_avx512) -mavx512bf16
ISA_FLAGS_amx := $(ISA_FLAGS_avx512_bf16) -mamx-tile -mamx-int8 -mamx-bf16
ISA_FLAGS_amx_sim512 := $(ISA_FLAGS_avx512_bf16)

# AMX kernels: written once (src/kernels/amx_gemm.c, amx_attn.c) and compiled once per target
# (src/kernels/amx_target.h): the hardware's tiles (hw), the portable tile model (sim) and the tile
# model with the hardware build's AVX-512 lanes (sim512). Objects are NAME-TARGET.o. The x86
# targets compile to nothing on other machines, so the AVX-512 flags are given only on x86-64.
AMX_KERNEL_SRC := src/kernels/amx_gemm.c src/kernels/amx_attn.c
AMX_TARGETS := hw sim sim512
ON_X86_64 := $(filter x86_64%,$(shell $(CC) -dumpmachine 2>/dev/null))
AMX_FLAGS_hw := -DAMX_TARGET_HW $(if $(ON_X86_64),$(ISA_FLAGS_amx))
AMX_FLAGS_sim := -DAMX_TARGET_SIM
AMX_FLAGS_sim512 := -DAMX_TARGET_SIM512 $(if $(ON_X86_64),$(ISA_FLAGS_amx_sim512))
amx_objs = $(foreach t,$(AMX_TARGETS),$(patsubst src/%.c,$(1)/src/%-$(t).o,$(AMX_KERNEL_SRC)))

# The service's directories: in libqvl_service.a, which `qvl` (and the tests) link before libqvl.a.
SVC_DIRS := src/server src/commands src/hub src/options
ALL_SRC := $(shell find src -name '*.c' | sort)
SVC_SRC := $(filter $(addsuffix /%,$(SVC_DIRS)),$(ALL_SRC))
LIB_SRC := $(filter-out $(SVC_SRC) $(AMX_KERNEL_SRC),$(ALL_SRC))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(call amx_objs,$(BUILD))
SVC_OBJ := $(SVC_SRC:%.c=$(BUILD)/%.o)
# The web UI (web/) is compiled into the service by tools/embed.c; the generated source lives in the
# build directory, so it is added here by hand (the glob above only sees src/).
WEB_FILES := $(shell find web -type f ! -name '.*' | sort)
SVC_OBJ += $(BUILD)/gen/web_assets.o
# What programs and tests link: the service first, then the library it calls.
ARCHIVES := $(BUILD)/libqvl_service.a $(BUILD)/libqvl.a
APP_SRC := $(wildcard apps/*.c)
TEST_SRC := $(wildcard tests/unit/*.c tests/kernels/*.c tests/golden/*.c)
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%-replay,$(FUZZ_SRC))

EXAMPLE_SRC := $(wildcard examples/*.c)
EXAMPLE_BIN := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRC))

.PHONY: all test test-quick test-san fuzz clean serve qvl-bin FORCE
all: $(BUILD)/qvl $(BUILD)/libqvl.so $(EXAMPLE_BIN) $(TEST_BIN) $(FUZZ_REPLAY)
	@ln -sf $(BUILD)/qvl qvl

$(BUILD)/libqvl.a: $(LIB_OBJ)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)ar rcs $@ $^

$(BUILD)/libqvl_service.a: $(SVC_OBJ)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)ar rcs $@ $^

# The shared library: what an embedder links (examples/ link it to prove the exports suffice).
# --no-undefined: a library object that calls into the service fails here, not in an embedder.
$(BUILD)/libqvl.so: $(LIB_OBJ)
	$(call say,LINK,$@)
	$(Q)$(CC) -shared -Wl,-soname,libqvl.so -Wl,--no-undefined $(LDFLAGS_ALL) -o $@ $^ $(LIB_LIBS)

$(BUILD)/src/kernels/x86/%.o: src/kernels/x86/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_LIB) $(ISA_FLAGS_$(basename $(notdir $<))) -c $< -o $@

$(BUILD)/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_LIB) -c $< -o $@


$(BUILD)/apps/%.o: apps/%.c
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_PUB) -Iapps -c $< -o $@

$(BUILD)/examples/%: examples/%.c $(BUILD)/libqvl.so
	@mkdir -p $(dir $@)
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_PUB) -o $@ $< $(BUILD)/libqvl.so -Wl,-rpath,'$$ORIGIN/..' $(LDFLAGS_ALL)

# Build tool, run on this machine: plain flags (no sanitizers), whatever the build mode.
$(BUILD)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O1 $(WARN) -o $@ $<

# The file list is kept in a file that changes only when the list does, so that removing or
# adding a file under web/ regenerates the table even though no timestamp got newer.
$(BUILD)/gen/web_files.list: FORCE
	@mkdir -p $(dir $@)
	@echo '$(WEB_FILES)' | cmp -s - $@ || echo '$(WEB_FILES)' > $@

# The page's third-party scripts come from Debian's packages, listed in tools/web_vendor.txt.
WEB_VENDOR := $(shell awk '!/^\#/ && NF == 3 {print $$2 "@" $$1}' tools/web_vendor.txt)
WEB_VENDOR_FILES := $(foreach v,$(WEB_VENDOR),$(firstword $(subst @, ,$(v))))
$(WEB_VENDOR_FILES):
	@echo "error: $@ is missing: install Debian's $$(awk -v f='$@' '$$2 == f {print $$3}' tools/web_vendor.txt) (tools/install-deps.sh)" >&2; exit 1

$(BUILD)/gen/web_assets.c: $(BUILD)/tools/embed $(BUILD)/gen/web_files.list $(WEB_FILES) $(WEB_VENDOR_FILES) tools/web_vendor.txt
	$(BUILD)/tools/embed $@ web $(WEB_FILES) $(WEB_VENDOR)

$(BUILD)/gen/web_assets.o: $(BUILD)/gen/web_assets.c
	$(CC) $(CFLAGS_LIB) -c $< -o $@

$(BUILD)/qvl: $(APP_SRC:%.c=$(BUILD)/%.o) $(ARCHIVES)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS)

# Just the program (what `make serve` needs), without the tests.
qvl-bin: $(BUILD)/qvl
	@ln -sf $(BUILD)/qvl qvl

$(BUILD)/tests/%: tests/%.c tests/test.h $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(ARCHIVES) $(LDFLAGS_ALL) $(LIBS)

# Fuzz targets: a replay driver (tests/fuzz/replay.c) runs each corpus file through the target.
$(BUILD)/fuzz/%-replay: tests/fuzz/%.c tests/fuzz/replay.c $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< tests/fuzz/replay.c $(ARCHIVES) $(LDFLAGS_ALL) $(LIBS)

# libFuzzer builds (clang): `make fuzz` builds build/fuzz/fuzz_* (the library instrumented, each ISA
# file with its own -m flags); `make fuzz-run FUZZ_SECONDS=N` runs each target N seconds on its corpus
# (new inputs go to build/fuzz/corpus/NAME, crashes to build/fuzz/artifacts/) and fails on a crash.
FUZZ_DIR := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -std=c11 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
  -D_GNU_SOURCE -Iinclude -Isrc -pthread $(PKG_CFLAGS)
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(filter-out $(AMX_KERNEL_SRC),$(ALL_SRC))) \
  $(call amx_objs,$(FUZZ_DIR)/obj) $(FUZZ_DIR)/obj/gen/web_assets.o
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(FUZZ_DIR)/%,$(FUZZ_SRC))

$(FUZZ_DIR)/obj/src/kernels/x86/%.o: src/kernels/x86/%.c
	@mkdir -p $(dir $@)
	$(call say,FUZZCC,$<)
	$(Q)clang $(FUZZ_CFLAGS) $(ISA_FLAGS_$(basename $(notdir $<))) -c $< -o $@

$(FUZZ_DIR)/obj/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(call say,FUZZCC,$<)
	$(Q)clang $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_DIR)/obj/gen/web_assets.o: $(BUILD)/gen/web_assets.c
	@mkdir -p $(dir $@)
	$(Q)clang $(FUZZ_CFLAGS) -c $< -o $@

# The AMX kernels, once per target (see AMX_KERNEL_SRC above), in every build and the fuzz build.
define amx_target_rule
$$(BUILD)/src/kernels/%-$(1).o: src/kernels/%.c
	@mkdir -p $$(dir $$@)
	$$(call say,CC,$$<:$(1))
	$$(Q)$$(CC) $$(CFLAGS_LIB) $$(AMX_FLAGS_$(1)) -c $$< -o $$@
$$(FUZZ_DIR)/obj/src/kernels/%-$(1).o: src/kernels/%.c
	@mkdir -p $$(dir $$@)
	$$(call say,FUZZCC,$$<:$(1))
	$$(Q)clang $$(FUZZ_CFLAGS) $$(AMX_FLAGS_$(1)) -c $$< -o $$@
endef
$(foreach t,$(AMX_TARGETS),$(eval $(call amx_target_rule,$(t))))

$(FUZZ_DIR)/libqvl-fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_DIR)/libqvl-fuzz.a
	$(call say,LINK,$@)
	$(Q)clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_DIR)/libqvl-fuzz.a $(LIBS)

.PHONY: fuzz-run
fuzz: $(FUZZ_BIN)

fuzz-run: fuzz
	@mkdir -p $(FUZZ_DIR)/artifacts
	@for b in $(FUZZ_BIN); do n=$$(basename $$b); c=$${n#fuzz_}; mkdir -p $(FUZZ_DIR)/corpus/$$c; \
	  echo "== $$n ($(FUZZ_SECONDS) s)"; \
	  $$b -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/artifacts/$$n- $(FUZZ_DIR)/corpus/$$c tests/fuzz/corpus/$$c \
	    > $(FUZZ_DIR)/$$n.log 2>&1 || { tail -40 $(FUZZ_DIR)/$$n.log; echo "$$n: FAILED (see $(FUZZ_DIR)/$$n.log)"; exit 1; }; \
	  grep -E "^stat::(number_of_executed_units|new_units_added)|cov: " $(FUZZ_DIR)/$$n.log | tail -3; done

# Benchmarks (not run by make test): make bench, then e.g. $(BUILD)/bench/kernels_bench --help
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
.PHONY: bench
bench: $(BENCH_BIN)

# The command line's argument parser is shared with the benchmarks by linking its object (apps/ is
# not part of libqvl; the benchmark images are, in src/commands/ of the service archive).
BENCH_APP_OBJ := $(BUILD)/apps/args.o
$(BUILD)/bench/%: bench/%.c $(BENCH_APP_OBJ) $(ARCHIVES)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Iapps -Itests -o $@ $< $(BENCH_APP_OBJ) $(ARCHIVES) $(LDFLAGS_ALL) $(LIBS)

# One command for a new user: install what is missing (apt), build, download the default model into
# the cache on first use and serve the web UI and the API at http://127.0.0.1:8080.
# Another model: make serve MODEL_SPEC=Qwen/Qwen3-VL-2B-Instruct-GGUF:Q4_K_M, or SERVE_ARGS="-m FILE.gguf --mmproj MMPROJ.gguf".
MODEL_SPEC ?= Qwen/Qwen3-VL-2B-Instruct-GGUF:Q8_0
SERVE_ARGS ?= --hf $(MODEL_SPEC)
serve:
	@tools/install-deps.sh
	@$(MAKE) --no-print-directory -j2 qvl-bin
	./qvl serve $(SERVE_ARGS)

# `make test` is what CI runs: the release build with every test, then the same unit, kernel, golden,
# CLI and fuzz-corpus tests under ASan + UBSan (the server and browser suites are left out there:
# they test timing-sensitive behaviour the sanitizers slow down), and a clang build with -Werror.
# `make test-quick` runs only the first part. The benchmark programs are built too, so that they cannot rot.
test: all bench
	@BUILD=$(BUILD) tests/run.sh
	@echo "== ASan + UBSan =="
	@$(MAKE) --no-print-directory SAN=1 -j2 all
	@BUILD=build/san QVL_E2E=0 QVL_BROWSER=0 tests/run.sh
	@echo "== ThreadSanitizer: engines side by side =="
	@$(MAKE) --no-print-directory TSAN=1 -j2 build/tsan/tests/unit/test_engines_concurrent
	@tests/tsan.sh build/tsan/tests/unit/test_engines_concurrent 2
	@echo "== clang -Werror build =="
	@$(MAKE) --no-print-directory CC=clang BUILD=build/rel-clang -j2 all

test-quick: all
	@BUILD=$(BUILD) tests/run.sh

test-san:
	$(MAKE) SAN=1 test-quick

clean:
	rm -rf build qvl

-include $(shell find build -name '*.d' 2>/dev/null)
