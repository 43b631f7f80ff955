# seckill — build, test, install.
#
#   make            build build/seckill-producer, build/seckill-consumer, build/seckillctl
#   make test       bring the local stack up, build (also with ASan+UBSan), run every test
#   make demo       the main job end to end
#   make bench      throughput next to the hardware's limits (build/bench.json)
#   make nemesis    SEED=N SECONDS=S [BUCKETS=K] [CLUSTER=1]: partitions, pauses, clocks, kills while
#                   buyers buy, then a check of every promise (build/nemesis.json; scripts/nemesis,
#                   docs/testing.md)
#   make tsan       ThreadSanitizer build (build/tsan), threaded integration tests under it (mk/tsan.mk)
#   make install    PREFIX=/usr/local DESTDIR= (binaries, config, SQL, systemd units)
#   make deb        Debian package build/seckill_<version>_<arch>.deb, checked by lintian (mk/deb.mk)
#   make stack-up / stack-down / stack-status

PREFIX  ?= /usr/local
DESTDIR ?=
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR  ?= $(PREFIX)/share/doc/seckill
CC      ?= cc
BUILD   ?= build
SAN     ?=

PKGS    := hiredis rdkafka libpq libconfig libmicrohttpd libsystemd jansson libcrypto
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# seckillctl alone: libcurl asks the daemons' /healthz (seckillctl watch).
CTL_PKGS   := libcurl
CTL_LIBS   := $(shell pkg-config --libs $(CTL_PKGS) 2>/dev/null)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-missing-field-initializers
CFLAGS  ?= -O2 -g
ifeq ($(SAN),1)
CFLAGS  := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(SAN),thread)
CFLAGS  := -O1 -g -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS += -fsanitize=thread
endif
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -pthread $(WARN) $(CFLAGS) -I$(BUILD)/gen $(PKG_CFLAGS)
# The layers: each folder sees only the headers it may use, so a reach into
# a layer above, or into another program's folder, fails to compile instead of
# linking by accident (docs/style.md, "Layers"). common/ is split by what a
# file knows: base (no service), one folder per service's link layer (redis,
# kafka, pg: each sees base and itself), and sale (the flash sale's own rules:
# orders, keys, the lock, the sweep), which sees every layer. The programs see
# all of common/ and their own folder; the tests see everything. A source's
# flags are picked by its folder: INC_<top folder>, or INC_common_<layer>.
INC_common_base  := -Icommon/base
INC_common_redis := $(INC_common_base) -Icommon/redis
INC_common_kafka := $(INC_common_base) -Icommon/kafka
INC_common_pg    := $(INC_common_base) -Icommon/pg
INC_common_sale  := $(INC_common_base) -Icommon/redis -Icommon/kafka -Icommon/pg -Icommon/sale
INC_all_common   := $(INC_common_sale)
INC_gen      := $(INC_all_common)
INC_producer := $(INC_all_common) -Iproducer
INC_consumer := $(INC_all_common) -Iconsumer
INC_ctl      := $(INC_all_common) -Ictl $(shell pkg-config --cflags $(CTL_PKGS) 2>/dev/null)
INC_bench    := $(INC_all_common)
INC_tests    := $(INC_all_common) -Ictl -Iproducer -Iconsumer -Itests
# inc_key PATH: common/redis/rpipe -> common_redis, producer/main -> producer
inc_key = $(if $(filter common,$(firstword $(subst /, ,$(1)))),common_$(word 2,$(subst /, ,$(1))),$(firstword $(subst /, ,$(1))))
# make print-inc-LAYER prints a layer's flags (tests/cli/test_house.sh proves the rule with them).
print-inc-%:
	@echo $(INC_$*)
LIBS    := $(PKG_LIBS) -pthread

COMMON_SRC := $(wildcard common/*/*.c)
CTL_SRC    := $(filter-out ctl/seckillctl.c,$(wildcard ctl/*.c))
PROD_SRC   := $(filter-out producer/main.c,$(wildcard producer/*.c))
CONS_SRC   := $(filter-out consumer/main.c,$(wildcard consumer/*.c))
EMBED_SRC  := $(sort $(wildcard common/*/lua/*.lua common/*/sql/*.sql ctl/lua/*.lua ctl/sql/*.sql \
                producer/lua/*.lua producer/sql/*.sql consumer/lua/*.lua consumer/sql/*.sql))
GEN_C      := $(BUILD)/gen/embed.c
GEN_H      := $(BUILD)/gen/embed.h

LIB_OBJ := $(COMMON_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/embed.o
CTL_OBJ := $(CTL_SRC:%.c=$(BUILD)/obj/%.o)
# common/ only: what more than one program runs.
LIB     := $(BUILD)/libseckill.a
# Each daemon's modules but main() in a library of their own, so unit tests
# link the very objects the daemon runs.
PROD_LIB := $(BUILD)/libproducer.a
CONS_LIB := $(BUILD)/libconsumer.a

BINS := $(BUILD)/seckill-producer $(BUILD)/seckill-consumer $(BUILD)/seckillctl

TEST_SRC  := $(wildcard tests/unit/*.c tests/it/*.c)
TEST_BINS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_HELPER_OBJ := $(BUILD)/obj/tests/harness.o $(BUILD)/obj/tests/sale.o $(BUILD)/obj/tests/life.o

.PHONY: all test tests demo bench nemesis test-scale test-after install clean stack-up stack-down stack-status
# Keep the objects of pattern-built test programs (not intermediates to delete).
.PRECIOUS: $(BUILD)/obj/%.o
all: $(BINS)

# One run of scripts/embed makes both files (a grouped target: parallel make runs it once).
$(GEN_C) $(GEN_H) &: $(EMBED_SRC) scripts/embed
	@mkdir -p $(BUILD)/gen
	scripts/embed $(GEN_C) $(GEN_H) $(EMBED_SRC)

$(BUILD)/obj/gen/embed.o: $(GEN_C)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(INC_gen) -c $< -o $@

$(BUILD)/obj/%.o: %.c $(GEN_H)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(INC_$(call inc_key,$*)) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(PROD_LIB): $(PROD_SRC:%.c=$(BUILD)/obj/%.o)
	rm -f $@
	$(AR) rcs $@ $^
$(CONS_LIB): $(CONS_SRC:%.c=$(BUILD)/obj/%.o)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/seckill-producer: $(BUILD)/obj/producer/main.o $(PROD_LIB) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)
$(BUILD)/seckill-consumer: $(BUILD)/obj/consumer/main.o $(CONS_LIB) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)
$(BUILD)/seckillctl: $(BUILD)/obj/ctl/seckillctl.o $(CTL_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(CTL_LIBS)

# The waiting room's buyers (bench/wroomload): make demo's queued sale and
# its test (tests/cli/test_demo_queue.sh) run them.
tests: $(TEST_BINS) $(BUILD)/bench/wroomload
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_HELPER_OBJ) $(PROD_LIB) $(CONS_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) -lcmocka

# make test sets up everything it needs: packages and services (scripts/stack
# up is idempotent), the release build (warnings are errors), then the
# sanitizer build of everything, the fuzz targets over their saved inputs,
# then the suite. The builds use every core (JOBS): on a fresh clone they
# are a few minutes of make test's 15 when run one file at a time.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test:
	scripts/stack up
	$(MAKE) --no-print-directory -j$(JOBS) all
	$(MAKE) --no-print-directory -j$(JOBS) BUILD=build/asan SAN=1 all tests
	$(MAKE) --no-print-directory -j$(JOBS) fuzz-regress
	tests/run build/asan

demo:
	scripts/stack up
	$(MAKE) --no-print-directory all $(BUILD)/bench/wroomload
	scripts/demo

# Figures, not tests: prints a table and writes build/bench.json.
bench:
	bench/deps
	scripts/stack up
	$(MAKE) --no-print-directory all $(BUILD)/bench/jwtverify $(BUILD)/bench/lockbench $(BUILD)/bench/kafkalimit \
	        $(BUILD)/bench/kafkaconnect $(BUILD)/bench/zipfitems $(BUILD)/bench/wroomload $(BUILD)/bench/bucketcap \
	        $(BUILD)/bench/rsvfloor
	bench/run

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# The scale-out run alone (issue #9), from the release build: three Kafka
# brokers, two producers, three consumers, a broker and a consumer SIGKILLed
# mid-sale. The test brings the cluster up itself and stops it at the end.
test-scale:
	$(MAKE) --no-print-directory all tests
	CMOCKA_MESSAGE_OUTPUT=TAP $(BUILD)/tests/it/test_scaleout

# What make test leaves to CI (.ci/run), for its 15 minutes: the scale-out
# run, the Kafka ACL test and the Debian package's (tests/run's AFTER list),
# with their own "N passed, N failed".
test-after:
	$(MAKE) --no-print-directory -j$(JOBS) all tests
	tests/run --after $(BUILD)

# The nemesis (issue #32), as root: the HA stack in network namespaces, a
# schedule of faults drawn from SEED (random when empty) for SECONDS, the
# checker; exit 0 only when nothing was broken. (`scripts/stack up` first:
# the packages and the Kafka jars the hosts' stack shares.) BUCKETS=K: each
# item in K buckets; CLUSTER=1: on the Redis Cluster (scripts/nemesis --help).
SEED    ?=
SECONDS ?= 300
nemesis:
	scripts/stack up
	$(MAKE) --no-print-directory all $(BUILD)/nemesis/cndskew.so
	scripts/nemesis $(if $(SEED),--seed $(SEED)) --seconds $(SECONDS) $(if $(BUCKETS),--buckets $(BUCKETS)) \
	    $(if $(filter 1,$(CLUSTER)),--cluster)

# Preloaded with libfaketime by the nemesis' clock faults (the file says why).
$(BUILD)/nemesis/cndskew.so: tests/nemesis/cndskew.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -shared -fPIC -o $@ $< -ldl

# Units name the installed paths, so they are filled in at install time.
UNIT_SED := sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g'

install: all install-man
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/seckill/sql/migrations $(DESTDIR)$(SYSCONFDIR)/seckill \
	        $(DESTDIR)$(UNITDIR) $(DESTDIR)$(PREFIX)/lib/sysusers.d $(DESTDIR)$(DOCDIR)
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	for u in config/systemd/*.in; do \
	    $(UNIT_SED) $$u >$(DESTDIR)$(UNITDIR)/$$(basename $$u .in) && chmod 644 $(DESTDIR)$(UNITDIR)/$$(basename $$u .in) || exit 1; \
	done
	install -m 644 config/systemd/seckill.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/seckill.conf
	install -d $(DESTDIR)$(SYSCONFDIR)/seckill/prometheus
	install -m 644 config/prometheus/seckill-rules.yml $(DESTDIR)$(SYSCONFDIR)/seckill/prometheus/
	install -m 644 README.md $(DESTDIR)$(DOCDIR)/
	install -d $(DESTDIR)$(DOCDIR)/docs && install -m 644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -m 644 sql/migrations/*.sql $(DESTDIR)$(PREFIX)/share/seckill/sql/migrations/
	install -m 755 scripts/migrate $(DESTDIR)$(PREFIX)/share/seckill/sql/migrate
	@# never overwrite an operator's edited configuration; its password files:
	@# the units' credentials by bare name, seckillctl's under secrets/ (docs/security.md)
	install -d -m 700 $(DESTDIR)$(SYSCONFDIR)/seckill/secrets
	test -e $(DESTDIR)$(SYSCONFDIR)/seckill/seckill.cfg || { \
	    sed -e 's#"\.\./\.stack/secrets/\(\(pg\|redis\|kafka\)-\(producer\|consumer\)\)"#"\1"#' \
	        -e 's@"\.\./\.stack/secrets/\(\(pg\|redis\|kafka\)-admin\)"@"$(SYSCONFDIR)/seckill/secrets/\1"@' \
	        -e 's@"\.\./\.stack/tls/ca\.crt"@"$(SYSCONFDIR)/seckill/tls/ca.crt"@' \
	        -e 's@order_key_dir = "\.\./\.stack/secrets"@order_key_dir = "$(SYSCONFDIR)/seckill/secrets"@' \
	        -e 's@"k1:order-key-1"@"k1:order-key"@' \
	        -e 's@payment_key_dir = "\.\./\.stack/secrets"@payment_key_dir = "$(SYSCONFDIR)/seckill/secrets"@' \
	        -e 's@"p1:payment-key-1"@"p1:payment-key"@' \
	        -e 's@admission_key_dir = "\.\./\.stack/secrets"@admission_key_dir = "$(SYSCONFDIR)/seckill/secrets"@' \
	        -e 's@"a1:admission-key-1"@"a1:admission-key"@' \
	        config/seckill.cfg >$(DESTDIR)$(SYSCONFDIR)/seckill/seckill.cfg && \
	    chmod 640 $(DESTDIR)$(SYSCONFDIR)/seckill/seckill.cfg; }

stack-up:
	scripts/stack up
stack-down:
	scripts/stack down
stack-status:
	scripts/stack status

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include mk/fuzz.mk
-include mk/docs.mk
-include mk/tsan.mk
-include mk/deb.mk
