/*
 * quoter: a C strategy for keel, the one docs/strategies.md walks through.
 *
 * It quotes one symbol on both sides, `offset` away from the top of book it reads from the
 * engine's market data; when the top moves it cancels both quotes and, once both are closed,
 * quotes again around the new top. Refusals are respected: a transient one ("pause") waits an
 * exponential back-off before the next quote, a breaker waits as long as the engine says, a
 * final one ("never") stops quoting. After `quotes` pairs, or at SIGINT/SIGTERM, it cancels
 * what is still open, waits for every order to close, and prints what it did as one JSON line.
 *
 *   cc -O2 -I sdk/c -o quoter examples/c/quoter.c sdk/c/keel.c
 *   ./quoter CHANNEL MARKET_DATA SYMBOL VENUE [QUOTES [QTY [OFFSET]]]
 *
 * Exit: 0 done, 1 stopped on a final refusal, 2 bad arguments or attach, 3 engine lost,
 * 4 orders still open 10 s after the stop.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel.h"

static volatile sig_atomic_t stop_asked;
static void on_signal(int sig) {
  (void)sig;
  stop_asked = 1;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One quote: an order resting on one side. `id` 0: none. */
typedef struct quote {
  uint64_t id;
  unsigned side;
  int accepted;    /* the venue has it: a refusal for this id now refuses our cancel */
  int cancel_sent;
} quote;

typedef struct counts {
  unsigned long placed, accepted, canceled, withdrawn, filled, rejected, refused, cancel_rejected,
      cancel_refused, unknown, moves, foreign;
  unsigned long long bought, sold;
} counts;

/* A fixed-point price (4 decimals) as text. */
static const char *px(int64_t p, char out[24]) {
  snprintf(out, 24, "%s%lld.%04lld", p < 0 ? "-" : "", (long long)(p < 0 ? -p : p) / 10000,
           (long long)(p < 0 ? -p : p) % 10000);
  return out;
}

static quote *find(quote q[2], uint64_t id) {
  for (int i = 0; i < 2; i++)
    if (q[i].id == id) return &q[i];
  return NULL;
}

static int outstanding(const quote q[2]) { return (q[0].id != 0) + (q[1].id != 0); }

/* A transient refusal: the next quote waits 10 ms, doubling up to 1 s while refusals go on. */
static void back_off(uint64_t *backoff_ns, uint64_t *resume_at, uint64_t now) {
  *backoff_ns = *backoff_ns ? *backoff_ns * 2 : 10000000u;
  if (*backoff_ns > 1000000000u) *backoff_ns = 1000000000u;
  *resume_at = now + *backoff_ns;
}

static void cancel_all(keel_channel *ch, quote q[2]) {
  for (int i = 0; i < 2; i++)
    if (q[i].id && !q[i].cancel_sent && keel_cancel(ch, q[i].id) == KEEL_OK) q[i].cancel_sent = 1;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s CHANNEL MARKET_DATA SYMBOL VENUE [QUOTES [QTY [OFFSET]]]\n", argv[0]);
    return 2;
  }
  unsigned long target = argc > 5 ? strtoul(argv[5], NULL, 10) : 10;
  uint32_t qty = argc > 6 ? (uint32_t)strtoul(argv[6], NULL, 10) : 10;
  int64_t offset = argc > 7 ? strtoll(argv[7], NULL, 10) : 100; /* 0.01 */

  keel_channel ch;
  keel_md md;
  char err[256];
  if (keel_attach(&ch, argv[1], err, sizeof err) != KEEL_OK) {
    fprintf(stderr, "quoter: %s\n", err);
    return 2;
  }
  if (keel_md_attach(&md, argv[2], err, sizeof err) != KEEL_OK) {
    fprintf(stderr, "quoter: %s\n", err);
    return 2;
  }
  int symbol = keel_symbol_id(&ch, argv[3]), venue = keel_venue_id(&ch, argv[4]);
  if (symbol < 0 || venue < 0) {
    fprintf(stderr, "quoter: %s\n", ch.error);
    return 2;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);

  /* Wait for a live engine (it must see our heartbeat, we must see its). */
  uint64_t start = now_ns();
  while (!keel_engine_live(&ch, 500000000u)) {
    keel_heartbeat(&ch);
    if (now_ns() - start > 20000000000u) {
      fprintf(stderr, "quoter: no live engine on %s within 20 s\n", argv[1]);
      return 3;
    }
    nanosleep(&(struct timespec){0, 2000000}, NULL);
  }

  quote q[2] = {{0}, {0}};
  counts c;
  memset(&c, 0, sizeof c);
  int64_t anchor_bid = 0, anchor_ask = 0; /* the top the live quotes were placed around */
  uint64_t backoff_ns = 0, resume_at = 0, stopped_at = 0;
  int final_refusal = 0, was_live = 1;
  const char *final_reason = "";
  uint64_t epoch = keel_engine_epoch(&ch);
  /* Ids below the first we allocate are a previous process's on this channel: the engine's
   * answers to them (its cancels when that process was lost) may still be unread. */
  uint64_t first_id = keel_next_id(&ch);
  /* The market data's heartbeat, and when it last moved: a file whose engine is gone (or a
   * stale copy) is never quoted on. */
  uint64_t md_beat = keel_md_heartbeat(&md), md_moved = 0;
  const char *why = "done";
  char p1[24], p2[24];
  for (;;) {
    keel_heartbeat(&ch);
    uint64_t now = now_ns();
    keel_event ev;
    int r;
    while ((r = keel_poll(&ch, &ev)) == KEEL_OK) {
      if (ev.id < first_id && ev.kind != KEEL_EV_MALFORMED) {
        c.foreign++;
        continue;
      }
      quote *o = find(q, ev.id);
      switch (ev.kind) {
        case KEEL_EV_ACCEPTED:
          c.accepted++;
          if (o) o->accepted = 1;
          backoff_ns = 0;
          break;
        case KEEL_EV_PARTIALLY_FILLED:
        case KEEL_EV_FILLED:
          if (o && o->side == KEEL_SIDE_BUY) c.bought += ev.qty;
          else if (o) c.sold += ev.qty;
          fprintf(stderr, "quoter: %s %u @ %s\n", o && o->side == KEEL_SIDE_BUY ? "bought" : "sold",
                  ev.qty, px(ev.price, p1));
          if (ev.kind == KEEL_EV_FILLED) {
            c.filled++;
            if (o) o->id = 0;
          }
          break;
        case KEEL_EV_CANCELED:
          /* Canceled before the venue had it: withdrawn inside keel (our cancel overtook the
           * queued new order), never at the venue. */
          if (o && !o->accepted) c.withdrawn++;
          else c.canceled++;
          if (o) o->id = 0;
          break;
        case KEEL_EV_CANCEL_REJECTED: /* too late: its fill is on the way */
          c.cancel_rejected++;
          break;
        case KEEL_EV_UNKNOWN: /* no answer in time: keel asks the venue; never resend */
          c.unknown++;
          break;
        case KEEL_EV_BREAKER_OPEN: /* wait as long as the engine says */
          c.refused++;
          if (o) o->id = 0;
          resume_at = now + ev.retry_after_ns;
          break;
        case KEEL_EV_REFUSED:
          if (!o || o->accepted) {
            /* Our cancel was refused: the order closed first ("unknown order": its fill or
             * cancel came meanwhile), or a transient reason: cancel it again later. */
            c.cancel_refused++;
            if (o) o->cancel_sent = 0;
            break;
          }
          c.refused++;
          o->id = 0;
          fprintf(stderr, "quoter: refused: %s\n", keel_refusal_name(ev.reason));
          if (keel_refusal_advice(ev.reason) == KEEL_ADVICE_NEVER) {
            final_refusal = 1;
            final_reason = keel_refusal_name(ev.reason);
          } else {
            back_off(&backoff_ns, &resume_at, now);
          }
          break;
        case KEEL_EV_SHED:
        case KEEL_EV_THROTTLED:
          c.refused++;
          if (o) o->id = 0;
          back_off(&backoff_ns, &resume_at, now);
          break;
        case KEEL_EV_REJECTED:
          c.rejected++;
          if (o) o->id = 0;
          fprintf(stderr, "quoter: rejected by the venue: %s\n", keel_reject_name(ev.reason));
          back_off(&backoff_ns, &resume_at, now);
          break;
        default:
          break;
      }
    }
    if (r == KEEL_ERR_FAULT) {
      fprintf(stderr, "quoter: %s\n", ch.error);
      return 3;
    }
    int live = keel_engine_live(&ch, 500000000u);
    if (!live && was_live) {
      fprintf(stderr, "quoter: the engine is gone (state %llu)\n",
              (unsigned long long)keel_engine_state(&ch));
      why = "engine lost";
      break;
    }
    was_live = live;
    if (keel_engine_epoch(&ch) != epoch) {
      /* Another engine process took over the channel: a cancel with no answer may not have
       * been read, so every open quote is canceled again (docs/ipc.md, restarts). */
      epoch = keel_engine_epoch(&ch);
      q[0].cancel_sent = q[1].cancel_sent = 0;
      cancel_all(&ch, q);
    }

    int stopping = stop_asked || final_refusal || c.placed >= 2 * target;
    if (stopping) {
      if (!stopped_at) stopped_at = now;
      cancel_all(&ch, q);
      if (!outstanding(q)) break;
      if (now - stopped_at > 10000000000u) {
        why = "orders still open";
        break;
      }
    } else {
      uint64_t beat = keel_md_heartbeat(&md);
      if (beat != md_beat) {
        md_beat = beat;
        md_moved = now;
      }
      keel_top top;
      int read = keel_md_top(&md, (uint16_t)symbol, &top);
      int usable = read == KEEL_OK && keel_md_synced(&md) && md_moved != 0 &&
                   now - md_moved < 500000000u && top.bids[0].qty > 0 && top.asks[0].qty > 0;
      if (read == KEEL_EMPTY) {
        /* The writer was in the slot all along: decide on the next pass. */
      } else if (outstanding(q)) {
        if (!usable || top.bids[0].price != anchor_bid || top.asks[0].price != anchor_ask) {
          if (!q[0].cancel_sent && !q[1].cancel_sent && usable) {
            c.moves++;
            fprintf(stderr, "quoter: top moved to %s / %s: cancel both\n",
                    px(top.bids[0].price, p1), px(top.asks[0].price, p2));
          }
          cancel_all(&ch, q);
        }
      } else if (usable && now >= resume_at && keel_venue_synced(&ch, (unsigned)venue)) {
        anchor_bid = top.bids[0].price;
        anchor_ask = top.asks[0].price;
        uint64_t bid = keel_next_id(&ch), ask = keel_next_id(&ch);
        int sent = 0;
        if (keel_place(&ch, bid, (uint16_t)venue, (uint16_t)symbol, KEEL_SIDE_BUY, qty,
                       anchor_bid - offset, KEEL_TIF_DAY, 0) == KEEL_OK) {
          q[0] = (quote){bid, KEEL_SIDE_BUY, 0, 0};
          c.placed++;
          sent++;
        }
        if (keel_place(&ch, ask, (uint16_t)venue, (uint16_t)symbol, KEEL_SIDE_SELL, qty,
                       anchor_ask + offset, KEEL_TIF_DAY, 0) == KEEL_OK) {
          q[1] = (quote){ask, KEEL_SIDE_SELL, 0, 0};
          c.placed++;
          sent++;
        }
        if (sent == 2) fprintf(stderr, "quoter: quote %lu: buy %u @ %s, sell %u @ %s\n", c.placed / 2, qty,
                px(anchor_bid - offset, p1), qty, px(anchor_ask + offset, p2));
      }
    }
    nanosleep(&(struct timespec){0, 100000}, NULL); /* idle 0.1 ms; spin here for latency */
  }
  char stopped[96];
  snprintf(stopped, sizeof stopped, "%s%s", final_refusal ? "final refusal: " : why,
           final_refusal ? final_reason : "");
  printf("{\"placed\": %lu, \"accepted\": %lu, \"canceled\": %lu, \"withdrawn\": %lu, "
         "\"filled\": %lu, \"bought\": %llu, \"sold\": %llu, \"rejected\": %lu, "
         "\"refused\": %lu, \"cancel_rejected\": %lu, \"cancel_refused\": %lu, "
         "\"unknown\": %lu, \"moves\": %lu, \"foreign\": %lu, \"stopped\": \"%s\"}\n",
         c.placed, c.accepted, c.canceled, c.withdrawn, c.filled, c.bought, c.sold, c.rejected,
         c.refused, c.cancel_rejected, c.cancel_refused, c.unknown, c.moves, c.foreign, stopped);
  keel_md_detach(&md);
  keel_detach(&ch);
  if (!strcmp(why, "engine lost")) return 3;
  if (!strcmp(why, "orders still open")) return 4;
  return final_refusal ? 1 : 0;
}
