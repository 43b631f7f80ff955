/* More of the fault suite's scenarios on the plain stack: poison messages on
 * the topic, a frozen consumer, Redis's data lost (a real FLUSHALL), each
 * with the suite's checker. One source with test_faults.c; this program is
 * run by make test-after (tests/run's AFTER list), not by make test, to keep
 * make test within its 15 minutes. */
#define FAULTS_MORE 1
#include "test_faults.c"
