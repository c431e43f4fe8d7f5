# bench/lib.sh: the shell helpers bench/run, bench/levers, bench/soak and bench/overload share.
# Sourced, not run. The caller sets WORK (the directory for logs), PORT (the DNS port of wait_answer),
# and for render SERVER_ADDR, RUN and PEERS.
# shellcheck shell=bash

log() { printf '[%s %s] %s\n' "${BENCH_TAG:-bench}" "$(date +%T)" "$*" >&2; }

# Processes: every server, resolver and target is a background job of the calling shell, and the jobs
# still running are stopped on exit. Only our own jobs (jobs -p), so a recycled process id of
# someone else's is never signalled.
cleanup() {
	local p live
	live=$(jobs -p)
	for p in $live; do
		kill -CONT "$p" 2>/dev/null || true
		kill -TERM "$p" 2>/dev/null || true
	done
	sleep 0.5
	for p in $(jobs -p); do
		kill -KILL "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start CPU NAME CMD... starts CMD pinned to CPU, logs to $WORK/NAME.log, sets PID.
start() {
	local cpu=$1 name=$2
	shift 2
	taskset -c "$cpu" "$@" >"$WORK/$name.log" 2>&1 &
	# shellcheck disable=SC2034 # read by the caller
	PID=$!
}

# stop PID: TERM, then KILL after 3 s. PID is a running job of ours (started by start).
stop() {
	local p=$1 _
	jobs -p | grep -qx "$p" || return 0
	kill -CONT "$p" 2>/dev/null || true
	kill -TERM "$p" 2>/dev/null || return 0
	for _ in $(seq 30); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}

# wait_answer ADDR NAME [PORT] [PID]: until the server answers NAME (any rcode but a timeout), at most
# 15 s. With PID, gives up as soon as that process has exited (a server that refused its config).
wait_answer() {
	local _ port=${3:-$PORT} pid=${4:-}
	for _ in $(seq 150); do
		if dig +tries=1 +time=1 -p "$port" @"$1" "$2" A >/dev/null 2>&1; then
			return 0
		fi
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			log "process $pid exited before $1:$port answered $2"
			return 1
		fi
		sleep 0.1
	done
	log "no answer from $1:$port for $2 after 15 s; its log:"
	tail -n 20 "$WORK"/*.log >&2 || true
	return 1
}

# sample_answers ADDR NAME: what ADDR:PORT answers to 8 queries for NAME from CLIENT_ADDR, as
# "COUNTx ANSWER, ..." (for the reports: shows each server answered what it should).
sample_answers() {
	local _
	for _ in 1 2 3 4 5 6 7 8; do
		dig +short +tries=1 +time=1 -b "$CLIENT_ADDR" -p "$PORT" @"$1" "$2" A | tr '\n' ' '
		echo
	done | sort | uniq -c | awk '{c = $1; $1 = ""; printf "%s%dx%s", (NR > 1 ? ", " : ""), c, $0}'
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hwm_kb() { awk '/^VmHWM/{print $2}' "/proc/$1/status"; }
rss_kb() { awk '/^VmRSS/{print $2}' "/proc/$1/status"; }
# shellcheck disable=SC2034 # read by the callers
CLK_TCK=$(getconf CLK_TCK)

# render SRC DST: copy a peer config with @ADDR@ @PORT@ @RUN@ @PEERS@ filled in.
render() {
	sed -e "s#@ADDR@#$SERVER_ADDR#g; s#@PORT@#$PORT#g; s#@RUN@#$RUN#g; s#@PEERS@#$PEERS#g" "$1" >"$2"
}

# start_resolver ADDR CPU: the loopback resolver of the forwarding cases, a gdnsd serving fwd.internal
# (bench/peers/gdnsd-upstream) on ADDR:PORT, pinned to CPU, in a fresh directory under WORK; waits
# until it answers. Sets RESOLVER_PID, and RUN to its directory (gdnsdctl -c "$RUN").
start_resolver() {
	local addr=$1 cpu=$2 save_addr=$SERVER_ADDR
	RUN=$WORK/up-$addr-$RANDOM
	mkdir -p "$RUN/zones"
	SERVER_ADDR=$addr
	render "$PEERS/gdnsd-upstream/config" "$RUN/config"
	SERVER_ADDR=$save_addr
	cp "$PEERS/gdnsd-upstream/fwd.internal" "$RUN/zones/fwd.internal"
	start "$cpu" "upstream-$addr" gdnsd -c "$RUN" start
	# shellcheck disable=SC2034 # read by the caller
	RESOLVER_PID=$PID
	wait_answer "$addr" ns1.fwd.internal
}

# check_plugins BINARY PLUGIN...: fails, naming them, unless BINARY -plugins lists every PLUGIN.
check_plugins() {
	local bin=$1 list p missing=""
	shift
	# (Read the whole list first: with pipefail, grep -q closing the pipe early would fail the test.)
	list=$("$bin" -plugins) || return 1
	for p in "$@"; do
		grep -qE "(^|[[:space:].])$p\$" <<<"$list" || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	echo "bench: $bin does not list$missing: its cmd/coredns must import the coresteer plugins" >&2
	return 1
}

# Figures. median_spread: a column of numbers on stdin -> "median (min..max)"; median: the median
# (0 for none); ratio A B: "A/Bx" to two places, "-" when B is 0.
median_spread() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s (%s..%s)", m, v[1], v[NR] }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print 0; exit } print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }

# apt_install LOG PACKAGE...: installs Debian packages (root), keeping their init scripts from
# starting system-wide daemons on port 53.
apt_install() {
	local aptlog=$1
	shift
	[ $# -eq 0 ] && return 0
	log "installing $* (Debian packages)"
	local made_policy=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		made_policy=1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >"$aptlog" 2>&1 ||
		{ tail -20 "$aptlog" >&2; exit 1; }
	if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
	return 0
}

# free_port ADDR: a TCP and UDP port nobody listens on (on ADDR or the wildcard), from 20000-59999.
free_port() {
	local p _
	for _ in $(seq 200); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		if [ -z "$(ss -Hlntu "( sport = :$p )" 2>/dev/null)" ]; then
			echo "$p"
			return 0
		fi
	done
	echo "bench: no free port found" >&2
	return 1
}
