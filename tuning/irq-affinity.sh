#!/usr/bin/env bash
# Moves interrupts off keel's loop cores CORES (a cpulist, e.g. `2-5`) onto the other cores.
# Without --apply it prints what it would change and changes nothing. With it (as root), it
# writes each IRQ's smp_affinity_list; IRQs the kernel manages itself refuse the write and are
# listed. Stop irqbalance first, or it moves them back.
#   usage: tuning/irq-affinity.sh CORES [--apply] [--root DIR]   (DIR: a copy of /proc, tests)
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 CORES [--apply] [--root DIR]" >&2
  exit 64
fi
cores=$1
shift
apply=0 root=/
while [ $# -gt 0 ]; do
  case $1 in
    --apply) apply=1 ;;
    --root) root=$2; shift ;;
    *) echo "irq-affinity.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
  shift
done
here=$(dirname "${BASH_SOURCE[0]}")
total=$(nproc --all)
# The housekeeping cores: irqaffinity= from the generator's line.
line=$("$here/cmdline.sh" "$cores" "$total")
house=$(grep -o 'irqaffinity=[^ ]*' <<<"$line" | cut -d= -f2)
mapfile -t loop < <(tr ',' '\n' <<<"$(grep -o 'nohz_full=[^ ]*' <<<"$line" | cut -d= -f2)")
in_loop() { # does cpulist $1 touch a loop core?
  local part a b c
  IFS=',' read -ra parts <<<"$1"
  for part in "${parts[@]}"; do
    if [[ $part =~ ^([0-9]+)-([0-9]+)$ ]]; then a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}; else a=$part b=$part; fi
    for c in "${loop[@]}"; do ((c >= a && c <= b)) && return 0; done
  done
  return 1
}
moved=0 refused=0 kept=0
for f in "$root"/proc/irq/*/smp_affinity_list; do
  [ -e "$f" ] || continue
  irq=$(basename "$(dirname "$f")")
  now=$(cat "$f")
  if ! in_loop "$now"; then kept=$((kept + 1)); continue; fi
  if [ $apply -eq 1 ]; then
    if echo "$house" >"$f" 2>/dev/null; then
      echo "irq $irq: $now -> $house"; moved=$((moved + 1))
    else
      echo "irq $irq: $now (kernel-managed: refused)"; refused=$((refused + 1))
    fi
  else
    echo "irq $irq: $now -> $house (dry run)"; moved=$((moved + 1))
  fi
done
echo "irq-affinity: $moved to move off $cores, $refused refused, $kept already elsewhere$([ $apply -eq 1 ] || echo ' (dry run: --apply to write)')"
