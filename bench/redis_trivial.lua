#!lua name=seckill_bench
-- bench/ingress's trivial function call in the issue's own words (issue #57:
-- "a trivial function call (one INCR)"): a function whose whole work is one
-- INCR of its one key. bench/ingress loads this library for its run (as the
-- stack's own user: no program's user may load code) and deletes it at the
-- end; no program calls it.
redis.register_function('seckill_bench_incr', function(keys)
  return redis.call('INCR', keys[1])
end)
