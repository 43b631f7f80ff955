-- $1 milliseconds: a session idle inside a transaction this long is ended by
-- the server. A consumer frozen mid-batch (SIGSTOP, a stalled VM) would
-- otherwise hold its item rows locked and stall every other consumer of
-- those items; its lease is gone by then anyway, and the rollback is what
-- the fence would have forced.
SELECT set_config('idle_in_transaction_session_timeout', $1, false)
