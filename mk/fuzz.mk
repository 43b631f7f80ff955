# Fuzzing (libFuzzer + ASan + UBSan) of the parsers that take bytes from
# outside: the producer's request body and bearer tokens, and the consumer's
# Kafka messages (orders, and payments with their MAC).
#
#   make fuzz [FUZZ_SECONDS=60]  fuzz each harness for FUZZ_SECONDS, one after the other
#   make fuzz-regress            run every saved input once (quick; part of make test)
#
# Harness sources are tests/fuzz/fuzz_<name>.c. Seeds are tests/fuzz/corpus/<name>/,
# inputs that once crashed or are tricky are tests/fuzz/regress/<name>/. libFuzzer
# writes only below $(FUZZ_DIR): its growing corpus in corpus-<name>/, crashers in
# artifacts/<name>/, never into the git tree.

FUZZ_CC      ?= clang
FUZZ_DIR     ?= build/fuzz
FUZZ_SECONDS ?= 60
# Extra libFuzzer flags for make fuzz, e.g. FUZZ_ARGS=-use_value_profile=1
# (not -jobs: its per-job logs land in the current directory).
FUZZ_ARGS    ?=
FUZZ_NAMES   := request order jwt payment
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)

# Recursive (=): jansson may only be installed by scripts/stack up, after this
# file was read. libcrypto: the token checks are OpenSSL's; libconfig and
# librdkafka: cfg.c, which the payment harness links (below).
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread $(WARN) -O1 -g -fno-omit-frame-pointer \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
              $(INC_all_common) -Iproducer $(shell pkg-config --cflags jansson libcrypto libconfig rdkafka)
FUZZ_LIBS   = $(shell pkg-config --libs jansson libcrypto libconfig rdkafka) -pthread
# A hang or a runaway allocation counts as a failure too.
FUZZ_RUN_FLAGS := -timeout=10 -rss_limit_mb=2048
# Longer than any body the producer takes by default (producer.body_limit 1024)
# and any order message (ORDER_MSG_MAX), as long as the longest token taken by
# default (jwt.max_token_bytes), short enough to keep runs fast.
FUZZ_MAX_LEN := 4096

.PHONY: fuzz fuzz-regress fuzz-toolchain

# Debian's clang ships libFuzzer in libclang-rt-14-dev, only a Recommends of
# clang, so an --no-install-recommends install lacks it: ask for both. The
# probe links a real fuzzer, which is what fails when the runtime is missing.
fuzz-toolchain:
	@mkdir -p $(FUZZ_DIR)
	@probe() { command -v $(FUZZ_CC) >/dev/null 2>&1 && \
	    printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' | \
	    $(FUZZ_CC) -x c -fsanitize=fuzzer -o $(FUZZ_DIR)/probe - >/dev/null 2>&1; }; \
	if ! probe; then \
	    [ "$$(id -u)" -eq 0 ] || { echo "fuzz: $(FUZZ_CC) with libFuzzer is missing (run as root, or: sudo apt-get install clang libclang-rt-dev)" >&2; exit 1; }; \
	    echo "fuzz: installing clang libclang-rt-dev"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends clang libclang-rt-dev; } >$(FUZZ_DIR)/apt.log 2>&1 \
	        || { tail -n 20 $(FUZZ_DIR)/apt.log >&2; echo "fuzz: apt-get install failed" >&2; exit 1; }; \
	    probe || { echo "fuzz: $(FUZZ_CC) -fsanitize=fuzzer still does not link" >&2; exit 1; }; \
	fi; \
	rm -f $(FUZZ_DIR)/probe

# Each harness is compiled together with just the sources it exercises, all
# instrumented, so coverage reaches into them (jansson and OpenSSL are not).
$(FUZZ_DIR)/fuzz_request: tests/fuzz/fuzz_request.c producer/request.c common/base/util.c common/base/jsonint.c
$(FUZZ_DIR)/fuzz_order: tests/fuzz/fuzz_order.c common/sale/order.c common/sale/msgenv.c common/base/util.c \
    common/base/jsonint.c
$(FUZZ_DIR)/fuzz_jwt: tests/fuzz/fuzz_jwt.c common/base/jwt.c common/base/secret.c common/base/util.c
# The payment's key list goes through keyring.c, which names the setting's
# place (cfg.c and cfglit.c: libconfig, and librdkafka, which checks raw
# properties) and logs a reload (log.c).
$(FUZZ_DIR)/fuzz_payment: tests/fuzz/fuzz_payment.c common/sale/paymsg.c common/sale/msgenv.c \
    common/sale/paysig.c common/base/keyring.c common/base/cfg.c common/base/cfglit.c common/base/netaddr.c common/base/log.c \
    common/base/secret.c common/base/util.c common/base/jsonint.c
$(FUZZ_BINS): $(wildcard common/*/*.h producer/*.h) mk/fuzz.mk | fuzz-toolchain
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) $(FUZZ_LIBS)

# Seeds and regression inputs are copied into a work corpus, so what libFuzzer
# adds or reduces stays under $(FUZZ_DIR); the work corpus is kept between
# runs, so a second make fuzz starts where the first stopped. Every harness
# runs, even when an earlier one crashes, and each says how it went.
fuzz: $(FUZZ_BINS)
	@fail=0; \
	for n in $(FUZZ_NAMES); do \
	    work=$(FUZZ_DIR)/corpus-$$n art=$(FUZZ_DIR)/artifacts/$$n/ log=$(FUZZ_DIR)/fuzz-$$n.log; \
	    mkdir -p $$work $$art; \
	    for f in tests/fuzz/corpus/$$n/* tests/fuzz/regress/$$n/*; do \
	        case $$f in */README) ;; *) cp $$f $$work/seed-$$(basename $$f) ;; esac; \
	    done; \
	    echo "fuzz $$n: $(FUZZ_SECONDS) s, log $$log"; \
	    rc=0; $(FUZZ_DIR)/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) $(FUZZ_RUN_FLAGS) -max_len=$(FUZZ_MAX_LEN) \
	        -dict=tests/fuzz/json.dict -artifact_prefix=$$art -print_final_stats=1 $(FUZZ_ARGS) \
	        $$work >$$log 2>&1 || rc=$$?; \
	    execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $$log | tail -n 1); \
	    done_line=$$(grep -E '^#[0-9]+[[:space:]]+DONE' $$log | tail -n 1); \
	    if [ $$rc -eq 0 ]; then \
	        echo "fuzz $$n: ok, $${execs:-?} executions: $$done_line"; \
	    else \
	        fail=1; \
	        tail -n 40 $$log; \
	        unit=$$(sed -n 's/.*Test unit written to //p' $$log | tail -n 1); \
	        echo "fuzz $$n: FAILED (exit $$rc) after $${execs:-?} executions; input: $${unit:-none, see $$log}"; \
	    fi; \
	done; \
	exit $$fail

# Every saved input once, each in a process of its own, so one crasher does
# not hide the next and the count is exact.
fuzz-regress: $(FUZZ_BINS)
	@n=0 bad=0 log=$(FUZZ_DIR)/regress.log one=$(FUZZ_DIR)/regress-one.log; : >$$log; \
	for t in $(FUZZ_NAMES); do \
	    for f in tests/fuzz/regress/$$t/* tests/fuzz/corpus/$$t/*; do \
	        case $$f in */README) continue ;; esac; \
	        n=$$((n + 1)); \
	        rc=0; $(FUZZ_DIR)/fuzz_$$t $(FUZZ_RUN_FLAGS) $$f >$$one 2>&1 || rc=$$?; \
	        cat $$one >>$$log; \
	        if [ $$rc -ne 0 ]; then \
	            bad=$$((bad + 1)); tail -n 30 $$one; \
	            echo "fuzz-regress: CRASH (exit $$rc) fuzz_$$t $$f"; \
	        fi; \
	    done; \
	done; \
	rm -f $$one; \
	echo "fuzz-regress: $$n inputs, $$bad crashes"; \
	[ $$bad -eq 0 ]
