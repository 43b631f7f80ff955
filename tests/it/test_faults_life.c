/* The fault suite's life variant (issue #44): the scenarios of
 * test_faults.c whose item has a payment window, with payments, cancels and
 * expiry beside the buyers, and their checker. One source for both
 * programs, so the scenarios' machinery is the suite's own; this one is run
 * by make test-after (tests/run's AFTER list), not by make test. */
#define FAULTS_LIFE 1
#include "test_faults.c"
