/* The fault suite's HA and Redis Cluster scenarios: a Redis primary killed
 * under Sentinel (with and without the synchronous replica), PostgreSQL
 * failed over to its standby, a Sentinel killed, a READONLY reply, a Cluster
 * primary killed and paused and a slot migrated mid-sale, each with the
 * suite's checker. One source with test_faults.c; this program is run by
 * make test-after (tests/run's AFTER list), not by make test: each scenario
 * brings up a stack of its own, four minutes of make test's fifteen. */
#define FAULTS_HA 1
#include "test_faults.c"
