/*
 * probe: keel.h and libkeel driven line by line, for core/cli/tests/sdk_c.rs.
 *
 *   probe layout          every constant, size and name in keel.h, "NAME VALUE" per line
 *   probe run PATH        attaches to PATH, then reads commands from stdin, one per line:
 *     place ID VENUE SYMBOL SIDE QTY PRICE TIF REDUCE_ONLY
 *     cancel ID | replace ID NEW_ID QTY PRICE | mass SCOPE SYMBOL
 *     poll                 the next event, or "empty"
 *     flood                places new orders until the ring is full; says how many
 *     declare SYM,SYM,.. VENUE,..   declares the table it names
 *     symbol NAME | venue NAME | nextid | live MS | heartbeat | state
 *   and answers one line each: "ok ...", or "error RESULT text".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../keel.h"

#define P(name) printf("%s %lld\n", #name, (long long)(name))

static void layout(void) {
  printf("KEEL_MAGIC %s\n", KEEL_MAGIC);
  P(KEEL_VERSION); P(KEEL_RECORD_LEN); P(KEEL_HEADER_LEN); P(KEEL_CAPACITY_MAX);
  P(KEEL_SYMBOL_NAME_LEN); P(KEEL_VENUE_NAME_LEN); P(KEEL_PRICE_SCALE);
  P(KEEL_OFF_MAGIC); P(KEEL_OFF_VERSION); P(KEEL_OFF_RECORD_LEN); P(KEEL_OFF_COMMAND_CAPACITY);
  P(KEEL_OFF_EVENT_CAPACITY); P(KEEL_OFF_STRATEGY); P(KEEL_OFF_ENGINE_HEARTBEAT);
  P(KEEL_OFF_ENGINE_EPOCH); P(KEEL_OFF_ENGINE_STATE); P(KEEL_OFF_ID_FLOOR);
  P(KEEL_OFF_VENUES_SYNCED); P(KEEL_OFF_ENGINE_PID); P(KEEL_OFF_CHANNEL_FAULT);
  P(KEEL_OFF_STRATEGY_HEARTBEAT); P(KEEL_OFF_STRATEGY_PID); P(KEEL_OFF_DECLARED_FINGERPRINT);
  P(KEEL_OFF_COMMAND_TAIL); P(KEEL_OFF_COMMAND_HEAD); P(KEEL_OFF_EVENT_TAIL);
  P(KEEL_OFF_EVENT_HEAD); P(KEEL_OFF_FAULT_FOUND); P(KEEL_OFF_FAULT_LIMIT);
  P(KEEL_OFF_CONFIG_FINGERPRINT); P(KEEL_OFF_NAME_COUNTS); P(KEEL_OFF_NAMES);
  P(KEEL_ENGINE_ABSENT); P(KEEL_ENGINE_STARTING); P(KEEL_ENGINE_RUNNING); P(KEEL_ENGINE_STOPPED);
  P(KEEL_FAULT_COMMAND_TAIL_BACK); P(KEEL_FAULT_COMMAND_TAIL_BEYOND);
  P(KEEL_FAULT_EVENT_HEAD_BACK); P(KEEL_FAULT_EVENT_HEAD_BEYOND); P(KEEL_FAULT_TABLE);
  P(KEEL_CMD_NEW); P(KEEL_CMD_CANCEL); P(KEEL_CMD_REPLACE); P(KEEL_CMD_MASS_CANCEL);
  P(KEEL_SIDE_BUY); P(KEEL_SIDE_SELL); P(KEEL_TIF_DAY); P(KEEL_TIF_IOC);
  P(KEEL_FLAG_REDUCE_ONLY); P(KEEL_SCOPE_STRATEGY); P(KEEL_SCOPE_SYMBOL);
  P(KEEL_MALFORMED_CHECKSUM); P(KEEL_MALFORMED_POSITION); P(KEEL_MALFORMED_FIELD);
  for (unsigned k = 1; k <= KEEL_EV_KIND_MAX; k++) printf("event %u %s\n", k, keel_event_kind_name(k));
  for (unsigned c = 0; c < 256; c++) {
    if (keel_refusal_advice(c) != KEEL_ADVICE_NONE)
      printf("refusal %u %s|%s\n", c, keel_refusal_name(c),
             keel_refusal_advice(c) == KEEL_ADVICE_PAUSE ? "pause" : "never");
  }
  for (unsigned c = 1; c <= KEEL_REJECT_OTHER; c++) printf("reject %u %s\n", c, keel_reject_name(c));
  for (unsigned c = 1; c <= KEEL_CANCEL_REJECT_NOT_APPLIED; c++)
    printf("cancel-reject %u %s\n", c, keel_cancel_reject_name(c));
  printf("sizeof-event %zu\n", sizeof(keel_event));
  const char *syms[] = {"AAPL", "MSFT", "AMZN", "NVDA"};
  const char *venues[] = {"sim"};
  printf("fingerprint %llu\n", (unsigned long long)keel_table_fingerprint(syms, 4, venues, 1));
  const uint8_t check[] = "123456789";
  printf("crc %u\n", keel_crc32(check, 9));
  P(KEEL_MD_VERSION); P(KEEL_MD_DEPTH); P(KEEL_MD_SLOT_LEN); P(KEEL_MD_TRADE_LEN);
  P(KEEL_MD_SYMBOLS_MAX);
  P(KEEL_MD_OFF_VERSION); P(KEEL_MD_OFF_SYMBOLS); P(KEEL_MD_OFF_TRADE_CAPACITY);
  P(KEEL_MD_OFF_DEPTH); P(KEEL_MD_OFF_HEARTBEAT); P(KEEL_MD_OFF_SYNCED);
  P(KEEL_MD_OFF_TRADES);
}

static void answer(keel_channel *ch, int r) {
  if (r == KEEL_OK)
    printf("ok\n");
  else
    printf("error %s %s\n", keel_result_name(r), ch->error);
}

static int split(char *list, const char **out, int max) {
  int n = 0;
  for (char *t = strtok(list, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
  return n;
}

static void run(const char *path) {
  keel_channel ch;
  char err[256];
  int r = keel_attach(&ch, path, err, sizeof err);
  if (r != KEEL_OK) {
    printf("error %s %s\n", keel_result_name(r), err);
    return;
  }
  printf("ok attached strategy %u\n", ch.strategy);
  fflush(stdout);
  char line[1024];
  while (fgets(line, sizeof line, stdin)) {
    char verb[32] = "";
    sscanf(line, "%31s", verb);
    unsigned long long id, new_id, venue, symbol, side, qty, tif, ro, scope;
    long long price;
    if (!strcmp(verb, "place") &&
        sscanf(line, "%*s %llu %llu %llu %llu %llu %lld %llu %llu", &id, &venue, &symbol, &side,
               &qty, &price, &tif, &ro) == 8) {
      answer(&ch, keel_place(&ch, id, (uint16_t)venue, (uint16_t)symbol, (unsigned)side,
                             (uint32_t)qty, price, (unsigned)tif, (int)ro));
    } else if (!strcmp(verb, "cancel") && sscanf(line, "%*s %llu", &id) == 1) {
      answer(&ch, keel_cancel(&ch, id));
    } else if (!strcmp(verb, "replace") &&
               sscanf(line, "%*s %llu %llu %llu %lld", &id, &new_id, &qty, &price) == 4) {
      answer(&ch, keel_replace(&ch, id, new_id, (uint32_t)qty, price));
    } else if (!strcmp(verb, "mass") && sscanf(line, "%*s %llu %llu", &scope, &symbol) == 2) {
      answer(&ch, keel_mass_cancel(&ch, (unsigned)scope, (uint16_t)symbol));
    } else if (!strcmp(verb, "poll")) {
      keel_event e;
      r = keel_poll(&ch, &e);
      if (r == KEEL_EMPTY)
        printf("empty\n");
      else if (r != KEEL_OK)
        answer(&ch, r);
      else
        printf("event %s id=%llu new_id=%llu qty=%u leaves=%u price=%lld reason=%u venue_code=%u "
               "retry=%llu mpos=%llu mval=%llu at=%llu\n",
               keel_event_kind_name(e.kind), (unsigned long long)e.id,
               (unsigned long long)e.new_id, e.qty, e.leaves, (long long)e.price, e.reason,
               e.venue_code, (unsigned long long)e.retry_after_ns,
               (unsigned long long)e.malformed_position, (unsigned long long)e.malformed_value,
               (unsigned long long)e.engine_ns);
    } else if (!strcmp(verb, "flood")) {
      unsigned n = 0;
      for (;;) {
        r = keel_place(&ch, keel_next_id(&ch), 0, 0, KEEL_SIDE_BUY, 1, 10000, KEEL_TIF_DAY, 0);
        if (r != KEEL_OK) break;
        n++;
      }
      printf("%s %u %s\n", keel_result_name(r), n, ch.error);
    } else if (!strcmp(verb, "declare")) {
      char syms[512] = "", venues[512] = "";
      sscanf(line, "%*s %511s %511s", syms, venues);
      const char *s[64], *v[64];
      int ns = split(syms, s, 64), nv = split(venues, v, 64);
      answer(&ch, keel_declare_table(&ch, s, (size_t)ns, v, (size_t)nv));
    } else if (!strcmp(verb, "symbol")) {
      char name[64] = "";
      sscanf(line, "%*s %63s", name);
      printf("symbol %d\n", keel_symbol_id(&ch, name));
    } else if (!strcmp(verb, "venue")) {
      char name[64] = "";
      sscanf(line, "%*s %63s", name);
      printf("venue %d\n", keel_venue_id(&ch, name));
    } else if (!strcmp(verb, "nextid")) {
      printf("id %llu\n", (unsigned long long)keel_next_id(&ch));
    } else if (!strcmp(verb, "live") && sscanf(line, "%*s %llu", &qty) == 1) {
      printf("live %d\n", keel_engine_live(&ch, qty * 1000000ull));
    } else if (!strcmp(verb, "heartbeat")) {
      keel_heartbeat(&ch);
      printf("ok\n");
    } else if (!strcmp(verb, "state")) {
      uint64_t found, limit;
      uint64_t fault = keel_engine_fault(&ch, &found, &limit);
      printf("state %llu epoch %llu floor %llu synced0 %d fault %llu\n",
             (unsigned long long)keel_engine_state(&ch), (unsigned long long)keel_engine_epoch(&ch),
             (unsigned long long)keel_id_floor(&ch), keel_venue_synced(&ch, 0),
             (unsigned long long)fault);
    } else if (!strcmp(verb, "quit")) {
      break;
    } else {
      printf("error arg unknown command %s", line);
    }
    fflush(stdout);
  }
  keel_detach(&ch);
}

/* `probe md PATH`: "top S" prints symbol S's top; "trade" the next trade, gap or empty;
 * "synced" the synced word;
 * "hammer S N" reads S's top N times and counts reads whose fields do not all derive from
 * their sequence number as the test's writer derives them (bid i = seq*10+i, qty +1; ask
 * price +2, qty +3). */
static void md(const char *path) {
  keel_md m;
  char err[256];
  int r = keel_md_attach(&m, path, err, sizeof err);
  if (r != KEEL_OK) {
    printf("error %s %s\n", keel_result_name(r), err);
    return;
  }
  printf("ok symbols %u capacity %u\n", m.symbols, m.trade_capacity);
  fflush(stdout);
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    unsigned long long s, n;
    keel_top t;
    if (sscanf(line, "top %llu", &s) == 1) {
      r = keel_md_top(&m, (uint16_t)s, &t);
      if (r != KEEL_OK) {
        printf("error %s\n", keel_result_name(r));
      } else {
        printf("top seq=%llu", (unsigned long long)t.seq);
        for (unsigned i = 0; i < KEEL_MD_DEPTH; i++)
          printf(" %lld/%llu:%lld/%llu", (long long)t.bids[i].price,
                 (unsigned long long)t.bids[i].qty, (long long)t.asks[i].price,
                 (unsigned long long)t.asks[i].qty);
        printf("\n");
      }
    } else if (!strncmp(line, "synced", 6)) {
      printf("synced %d\n", keel_md_synced(&m));
    } else if (!strncmp(line, "trade", 5)) {
      keel_trade tr;
      uint64_t lost;
      r = keel_md_next_trade(&m, &tr, &lost);
      if (r == KEEL_OK)
        printf("trade symbol=%u seq=%llu price=%lld qty=%llu buy=%d\n", tr.symbol,
               (unsigned long long)tr.seq, (long long)tr.price, (unsigned long long)tr.qty, tr.buy);
      else if (r == KEEL_MD_GAP)
        printf("gap %llu\n", (unsigned long long)lost);
      else
        printf("empty\n");
    } else if (sscanf(line, "hammer %llu %llu", &s, &n) == 2) {
      unsigned long long torn = 0, back = 0, last = 0, written = 0;
      for (unsigned long long k = 0; k < n; k++) {
        if (keel_md_top(&m, (uint16_t)s, &t) != KEEL_OK || t.seq == 0) continue;
        written++;
        for (unsigned i = 0; i < KEEL_MD_DEPTH; i++) {
          long long b = (long long)(t.seq * 10 + i);
          if (t.bids[i].price != b || t.bids[i].qty != (uint64_t)b + 1 ||
              t.asks[i].price != b + 2 || t.asks[i].qty != (uint64_t)b + 3) {
            torn++;
            break;
          }
        }
        if (t.seq < last) back++;
        last = t.seq;
      }
      printf("hammer reads=%llu torn=%llu back=%llu last=%llu retries=%llu\n", written, torn,
             back, last, (unsigned long long)m.retries);
    } else if (!strncmp(line, "quit", 4)) {
      break;
    }
    fflush(stdout);
  }
  keel_md_detach(&m);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "md")) {
    md(argv[2]);
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "layout")) {
    layout();
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "run")) {
    run(argv[2]);
    return 0;
  }
  fprintf(stderr, "usage: probe layout | probe run PATH\n");
  return 2;
}
