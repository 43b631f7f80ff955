# ThreadSanitizer build and run (issue #17).
#
#   make tsan      build everything and the tests with -fsanitize=thread in
#                  build/tsan, then run the integration tests that exercise
#                  threads (tests/tsan/run); any TSan report fails the run.
#
# Needs the local stack up (make stack-up), like the integration tests.
# CI runs it after make test (.ci/run), on the stack make test left up: 111 s
# here from a clean build/tsan (the build about 30 s, the tests about 80 s).
# One test alone: make BUILD=build/tsan SAN=thread tests, then
#   tests/tsan/run build/tsan test_producer
# tests/tsan/run wraps each test in `setarch x86_64 -R` (this kernel's mmap
# randomisation puts mappings where TSan's shadow memory must go) and points
# TSan at tests/tsan/tsan.supp (races inside third-party libraries only).
#
# Every TSan binary links tests/tsan/thrd_interpose.c: librdkafka starts its
# threads with C11 thrd_create, which gcc 12's and clang 14's TSan do not
# intercept (see that file).

TSAN_DIR ?= build/tsan

.PHONY: tsan
tsan:
	$(MAKE) --no-print-directory BUILD=$(TSAN_DIR) SAN=thread all tests
	tests/tsan/run $(TSAN_DIR)

ifeq ($(SAN),thread)
TSAN_INTERPOSE := $(BUILD)/obj/tests/tsan/thrd_interpose.o
# A prerequisite without a recipe: it joins $^ of each link line.
$(BINS) $(TEST_BINS): $(TSAN_INTERPOSE)
endif
