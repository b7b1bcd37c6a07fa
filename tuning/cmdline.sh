#!/usr/bin/env bash
# Prints the kernel command-line arguments that give keel's loops the cores CORES (a cpulist,
# e.g. `2-5` or `2,3`): nothing else is scheduled there (isolcpus), the scheduler tick stops
# (nohz_full), RCU callbacks run elsewhere (rcu_nocbs), interrupts default to the other cores
# (irqaffinity), and idle states stay shallow. Add them to GRUB_CMDLINE_LINUX and reboot.
#   usage: tuning/cmdline.sh CORES [TOTAL]   (TOTAL: the machine's cores, default nproc)
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 CORES [TOTAL]   e.g. $0 2-5" >&2
  exit 64
fi
cores=$1
total=${2:-$(nproc --all)}
# Expand the cpulist into `loop`, refusing anything else.
loop=()
IFS=',' read -ra parts <<<"$cores"
for part in "${parts[@]}"; do
  if [[ $part =~ ^([0-9]+)-([0-9]+)$ ]]; then
    a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}
    if ((10#$b < 10#$a)); then echo "cmdline.sh: bad range '$part'" >&2; exit 64; fi
    if ((${#b} > 6 || 10#$b >= total)); then
      echo "cmdline.sh: core $b: this machine has $total cores (0-$((total - 1)))" >&2
      exit 64
    fi
    for ((i = 10#$a; i <= 10#$b; i++)); do loop+=("$i"); done
  elif [[ $part =~ ^[0-9]+$ ]]; then
    if ((${#part} > 6)); then echo "cmdline.sh: core $part: this machine has $total cores" >&2; exit 64; fi
    loop+=("$((10#$part))")
  else
    echo "cmdline.sh: '$part' is not a core number or range (CORES: e.g. 2-5 or 2,3)" >&2
    exit 64
  fi
done
if [ ${#loop[@]} -eq 0 ]; then echo "cmdline.sh: no core given" >&2; exit 64; fi
declare -A isolated=()
for c in "${loop[@]}"; do
  if ((c >= total)); then
    echo "cmdline.sh: core $c: this machine has $total cores (0-$((total - 1)))" >&2
    exit 64
  fi
  isolated[$c]=1
done
house=()
for ((c = 0; c < total; c++)); do
  [ -z "${isolated[$c]:-}" ] && house+=("$c")
done
if [ ${#house[@]} -eq 0 ]; then
  echo "cmdline.sh: no core left for the kernel and everything else: keep at least one" >&2
  exit 64
fi
join() { local IFS=,; echo "$*"; }
list=$(join "${loop[@]}")
echo "isolcpus=managed_irq,domain,$list nohz_full=$list rcu_nocbs=$list irqaffinity=$(join "${house[@]}") processor.max_cstate=1 intel_idle.max_cstate=0 nosoftlockup tsc=reliable"
