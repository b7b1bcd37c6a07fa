/*
 * The C side of bench/src/bin/strategy_rtt.rs, with sdk/c.
 *
 *   strategy_client rtt CHANNEL ORDERS   one order at a time: place, spin on keel_poll until
 *                                        its Accepted ("rtt <ns>" per order, CLOCK_MONOTONIC),
 *                                        then cancel it, untimed
 *   strategy_client md FILE READS        keel_md_top on symbol 0, READS times in batches of
 *                                        1,000 ("batch <ns per read>" per batch)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel.h"

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int wait_for(keel_channel *ch, uint64_t id, unsigned kind) {
  keel_event ev;
  for (;;) {
    int r = keel_poll(ch, &ev);
    if (r == KEEL_OK) {
      if (ev.id == id && ev.kind == kind) return 0;
      if (ev.id == id) {
        fprintf(stderr, "order %llu: %s (%s)\n", (unsigned long long)id,
                keel_event_kind_name(ev.kind), keel_refusal_name(ev.reason));
        return -1;
      }
    } else if (r != KEEL_EMPTY) {
      fprintf(stderr, "poll: %s\n", ch->error);
      return -1;
    }
  }
}

static int rtt(const char *path, unsigned long orders) {
  keel_channel ch;
  char err[256];
  if (keel_attach(&ch, path, err, sizeof err) != KEEL_OK) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  uint64_t start = now_ns();
  while (!keel_engine_live(&ch, 500000000u) || !keel_venue_synced(&ch, 0)) {
    keel_heartbeat(&ch);
    if (now_ns() - start > 20000000000u) {
      fprintf(stderr, "no live engine\n");
      return 3;
    }
  }
  for (unsigned long i = 0; i < orders; i++) {
    keel_heartbeat(&ch);
    uint64_t id = keel_next_id(&ch);
    uint64_t t0 = now_ns();
    if (keel_place(&ch, id, 0, 1, KEEL_SIDE_BUY, 10, 500000, KEEL_TIF_DAY, 0) != KEEL_OK ||
        wait_for(&ch, id, KEEL_EV_ACCEPTED) != 0)
      return 1;
    uint64_t t1 = now_ns();
    printf("rtt %llu\n", (unsigned long long)(t1 - t0));
    if (keel_cancel(&ch, id) != KEEL_OK || wait_for(&ch, id, KEEL_EV_CANCELED) != 0) return 1;
  }
  keel_detach(&ch);
  return 0;
}

static int md(const char *path, unsigned long reads) {
  keel_md m;
  char err[256];
  if (keel_md_attach(&m, path, err, sizeof err) != KEEL_OK) {
    fprintf(stderr, "%s\n", err);
    return 2;
  }
  keel_top t;
  uint64_t sink = 0;
  for (unsigned long b = 0; b < reads / 1000; b++) {
    uint64_t t0 = now_ns();
    for (int i = 0; i < 1000; i++) {
      keel_md_top(&m, 0, &t);
      sink += t.seq;
    }
    uint64_t t1 = now_ns();
    printf("batch %.2f\n", (double)(t1 - t0) / 1000.0);
  }
  printf("retries %llu sink %llu\n", (unsigned long long)m.retries, (unsigned long long)sink);
  keel_md_detach(&m);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "rtt")) return rtt(argv[2], strtoul(argv[3], NULL, 10));
  if (argc == 4 && !strcmp(argv[1], "md")) return md(argv[2], strtoul(argv[3], NULL, 10));
  fprintf(stderr, "usage: %s rtt CHANNEL ORDERS | md FILE READS\n", argv[0]);
  return 2;
}
