#!/usr/bin/env bash
# Reads the host's settings that matter to keel's latency and reports each as ok/warn.
# Changes nothing; exits 0 even with warnings (a shared machine is allowed, just slower).
set -u
ok() { printf '  ok    %s\n' "$*"; }
warn() { printf '  warn  %s\n' "$*"; }
read_file() { cat "$1" 2>/dev/null || echo "?"; }

echo "keel preflight: $(nproc) cores, kernel $(uname -r)"

cmdline=$(read_file /proc/cmdline)
if grep -q 'isolcpus=' <<<"$cmdline"; then ok "isolated cores: $(grep -o 'isolcpus=[^ ]*' <<<"$cmdline")"; else warn "no isolcpus= on the kernel command line: loops share cores with everything else"; fi
if grep -q 'nohz_full=' <<<"$cmdline"; then ok "nohz_full set"; else warn "no nohz_full=: the scheduler tick interrupts the loops"; fi

if grep -qw constant_tsc /proc/cpuinfo && grep -qw nonstop_tsc /proc/cpuinfo; then ok "invariant TSC (constant_tsc, nonstop_tsc)"; else warn "TSC not invariant: the clock falls back to the OS monotonic clock"; fi

gov=$(read_file /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor)
case "$gov" in performance) ok "cpufreq governor: performance" ;; "?") warn "cpufreq governor not visible (virtual machine?)" ;; *) warn "cpufreq governor: $gov (want performance)" ;; esac

thp=$(read_file /sys/kernel/mm/transparent_hugepage/enabled)
case "$thp" in *"[always]"*) warn "transparent huge pages: always (want madvise or never)" ;; *) ok "transparent huge pages: $thp" ;; esac

if [ -z "$(swapon --noheadings 2>/dev/null)" ]; then ok "swap off"; else warn "swap on"; fi

iou=$(read_file /proc/sys/kernel/io_uring_disabled)
case "$iou" in 0) ok "io_uring enabled" ;; "?") ok "io_uring_disabled not present (older kernel: enabled)" ;; *) warn "kernel.io_uring_disabled = $iou: no io_uring; keel runs on its epoll transport (docs/operations.md, Transports)" ;; esac

if pgrep -x irqbalance >/dev/null 2>&1; then warn "irqbalance running: it may move IRQs onto loop cores"; else ok "irqbalance not running"; fi

bp=$(read_file /proc/sys/net/core/busy_poll)
if [ "$bp" != "?" ] && [ "$bp" -gt 0 ] 2>/dev/null; then ok "net.core.busy_poll = $bp"; else warn "net.core.busy_poll = $bp (consider 50)"; fi
exit 0
