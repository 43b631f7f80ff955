# shellcheck shell=bash
# scripts/stack.d/prometheus.sh: the Prometheus of --monitoring (issue #18,
# 19090).
# Sourced by scripts/stack; needs its settings (ROOT, STATE) and common.sh.

# --- Prometheus (--monitoring) ----------------------------------------------

# A real Prometheus (Debian's package) on 127.0.0.1:19090, scraping the
# daemons every second with the shipped rules. Targets come from files
# (file_sd, watched): targets/producer-*.json and targets/consumer-*.json;
# `up --monitoring` writes the dev daemons' (9099: the producer's operator
# listener; 9101: the consumer's), a test adds its own.
PROM_PORT=19090
PROM_DIR=$STATE/prometheus
prom_ready() { curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null; }

prom_up() {
    mkdir -p "$PROM_DIR/targets" "$PROM_DIR/data"
    # A state folder from before the operator listener names the buyers' port.
    grep -qs '127.0.0.1:8080' "$PROM_DIR/targets/producer-dev.json" && rm -f "$PROM_DIR/targets/producer-dev.json"
    [ -e "$PROM_DIR/targets/producer-dev.json" ] || echo '[{"targets": ["127.0.0.1:9099"]}]' >"$PROM_DIR/targets/producer-dev.json"
    [ -e "$PROM_DIR/targets/consumer-dev.json" ] || echo '[{"targets": ["127.0.0.1:9101"]}]' >"$PROM_DIR/targets/consumer-dev.json"
    cat >"$PROM_DIR/prometheus.yml" <<EOP
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/config/prometheus/seckill-rules.yml
scrape_configs:
  - job_name: seckill-producer
    file_sd_configs:
      - files: ["$PROM_DIR/targets/producer-*.json"]
  - job_name: seckill-consumer
    file_sd_configs:
      - files: ["$PROM_DIR/targets/consumer-*.json"]
EOP
    if pid_alive "$PROM_DIR/prometheus.pid" && prom_ready; then
        curl -sf -X POST "http://127.0.0.1:$PROM_PORT/-/reload" >/dev/null || die "prometheus: reload refused; see $PROM_DIR/prometheus.log"
    else
        # Not ours, yet answering (another checkout's stack, or one whose folder was removed
        # while it ran): ours could not bind, and the tests would query the other one.
        if prom_ready; then
            die "prometheus: 127.0.0.1:$PROM_PORT answers, but not as the one of $PROM_DIR; stop it first"
        fi
        setsid nohup prometheus --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/data" \
            --storage.tsdb.retention.time=2d --web.listen-address="127.0.0.1:$PROM_PORT" --web.enable-lifecycle \
            --log.level=warn >"$PROM_DIR/prometheus.log" 2>&1 </dev/null &
        echo $! >"$PROM_DIR/prometheus.pid"
    fi
    wait_for "prometheus" "$PROM_DIR/prometheus.log" "$PROM_DIR/prometheus.pid" prom_ready
    say "prometheus up on http://127.0.0.1:$PROM_PORT (rules config/prometheus/seckill-rules.yml, targets in $PROM_DIR/targets)"
}
stop_prometheus() { if [ -f "$PROM_DIR/prometheus.pid" ]; then stop_pidfile prometheus "$PROM_DIR/prometheus.pid"; fi; }
