# Shared by the fleet benchmarks (run_fleet_bench.sh, profile_hub.sh); sourced, not run.

# fleet_tokens GPUWATCH WORK: WORK/tokens with a read token (printed) and six write tokens, and
# WORK/w.token with the write tokens one a line: fleet_load's connection w sends with line w,
# so its six connections are six senders to the hub (a sender is a token and an address).
fleet_tokens() {
  local g=$1 work=$2 r w
  r=$("$g" token new read | cut -d' ' -f1)
  echo "$r read" >"$work/tokens"
  : >"$work/w.token"
  for _ in 1 2 3 4 5 6; do
    w=$("$g" token new write | cut -d' ' -f1)
    echo "$w write" >>"$work/tokens"
    echo "$w" >>"$work/w.token"
  done
  chmod 600 "$work/tokens" "$work/w.token"
  echo "$r"
}
