/*
 * keel.c: the strategy's side of keel's shared-memory channel (keel.h, docs/ipc.md).
 * C11 with the GCC/Clang __atomic builtins; no allocation, no system call per message.
 */
#define _GNU_SOURCE
#include "keel.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ----- words -------------------------------------------------------------------------- */

static uint64_t *word(const keel_channel *ch, size_t off) { return (uint64_t *)(ch->base + off); }

/* One aligned 8-byte load or store each (docs/ipc.md, "Storing an index"). */
static uint64_t load(const keel_channel *ch, size_t off) {
  return __atomic_load_n(word(ch, off), __ATOMIC_ACQUIRE);
}
static void store(keel_channel *ch, size_t off, uint64_t v) {
  __atomic_store_n(word(ch, off), v, __ATOMIC_RELEASE);
}

static uint32_t u32_at(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t u64_at(const uint8_t *p) { return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32; }
static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static int fail(keel_channel *ch, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ch->error, sizeof ch->error, fmt, ap);
  va_end(ap);
  return code;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int process_exists(uint64_t pid) {
  if (pid == 0 || pid > (uint64_t)0x7fffffff) return 0;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* ----- CRC-32 ------------------------------------------------------------------------- */

uint32_t keel_crc32(const uint8_t *bytes, size_t len) {
  static uint32_t table[256];
  static int ready = 0;
  if (!ready) {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = 1;
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < len; i++) c = table[(c ^ bytes[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/* ----- attach ------------------------------------------------------------------------- */

static int is_power_of_two(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

int keel_attach(keel_channel *ch, const char *path, char *err, size_t err_len) {
  memset(ch, 0, sizeof *ch);
  ch->fd = -1;
  int r = KEEL_OK;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    r = fail(ch, KEEL_ERR_IO, "%s: %s", path, strerror(errno));
    goto out;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    r = fail(ch, KEEL_ERR_LAYOUT, "%s: not a regular file", path);
    close(fd);
    goto out;
  }
  if ((uint64_t)st.st_size < KEEL_HEADER_LEN) {
    r = fail(ch, KEEL_ERR_LAYOUT, "%s: %lld bytes, shorter than the %u-byte header", path,
             (long long)st.st_size, KEEL_HEADER_LEN);
    close(fd);
    goto out;
  }
  void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    r = fail(ch, KEEL_ERR_IO, "%s: mmap: %s", path, strerror(errno));
    close(fd);
    goto out;
  }
  ch->base = base;
  ch->len = (size_t)st.st_size;
  ch->fd = fd;
  const uint8_t *h = ch->base;
  uint32_t version = u32_at(h + KEEL_OFF_VERSION);
  uint32_t record_len = u32_at(h + KEEL_OFF_RECORD_LEN);
  uint32_t cc = u32_at(h + KEEL_OFF_COMMAND_CAPACITY);
  uint32_t ec = u32_at(h + KEEL_OFF_EVENT_CAPACITY);
  if (memcmp(h + KEEL_OFF_MAGIC, KEEL_MAGIC, 8) != 0) {
    r = fail(ch, KEEL_ERR_LAYOUT, "%s: not a keel channel (magic %02x%02x%02x%02x...)", path,
             h[0], h[1], h[2], h[3]);
  } else if (version != KEEL_VERSION) {
    r = fail(ch, KEEL_ERR_LAYOUT, "%s: layout version %u, this library reads %u", path, version,
             KEEL_VERSION);
  } else if (record_len != KEEL_RECORD_LEN) {
    r = fail(ch, KEEL_ERR_LAYOUT, "%s: record length %u, this library reads %u", path,
             record_len, KEEL_RECORD_LEN);
  } else if (!is_power_of_two(cc) || !is_power_of_two(ec) || cc > KEEL_CAPACITY_MAX ||
             ec > KEEL_CAPACITY_MAX) {
    r = fail(ch, KEEL_ERR_LAYOUT, "%s: ring capacities %u and %u (powers of two up to %u)", path,
             cc, ec, KEEL_CAPACITY_MAX);
  } else if ((uint64_t)st.st_size !=
             KEEL_HEADER_LEN + ((uint64_t)cc + (uint64_t)ec) * KEEL_RECORD_LEN) {
    r = fail(ch, KEEL_ERR_LAYOUT, "%s: %lld bytes, the rings need %llu", path,
             (long long)st.st_size,
             (unsigned long long)(KEEL_HEADER_LEN + ((uint64_t)cc + ec) * KEEL_RECORD_LEN));
  }
  if (r != KEEL_OK) goto unmap;
  ch->command_capacity = cc;
  ch->event_capacity = ec;
  ch->strategy = (uint16_t)(h[KEEL_OFF_STRATEGY] | h[KEEL_OFF_STRATEGY + 1] << 8);
  ch->command_tail = load(ch, KEEL_OFF_COMMAND_TAIL);
  ch->event_head = load(ch, KEEL_OFF_EVENT_HEAD);
  ch->seen_command_head = load(ch, KEEL_OFF_COMMAND_HEAD);
  ch->seen_event_tail = load(ch, KEEL_OFF_EVENT_TAIL);
  if (ch->seen_command_head > ch->command_tail ||
      ch->command_tail - ch->seen_command_head > cc || ch->event_head > ch->seen_event_tail ||
      ch->seen_event_tail - ch->event_head > ec) {
    r = fail(ch, KEEL_ERR_LAYOUT,
             "%s: inconsistent indices (command %llu/%llu, event %llu/%llu): restart the engine",
             path, (unsigned long long)ch->seen_command_head,
             (unsigned long long)ch->command_tail, (unsigned long long)ch->event_head,
             (unsigned long long)ch->seen_event_tail);
    goto unmap;
  }
  uint64_t writer = load(ch, KEEL_OFF_STRATEGY_PID);
  if (writer != 0 && writer != (uint64_t)getpid() && process_exists(writer)) {
    r = fail(ch, KEEL_ERR_IN_USE, "%s: process %llu writes this channel already", path,
             (unsigned long long)writer);
    goto unmap;
  }
  store(ch, KEEL_OFF_STRATEGY_PID, (uint64_t)getpid());
  ch->next_seq = 1;
  /* The heartbeat as found: only a change after this counts as the engine being seen alive. */
  ch->seen_heartbeat = keel_engine_heartbeat(ch);
  goto out;
unmap:
  munmap(ch->base, ch->len);
  close(ch->fd);
  ch->base = NULL;
  ch->fd = -1;
out:
  if (err && err_len) snprintf(err, err_len, "%s", r == KEEL_OK ? "" : ch->error);
  return r;
}

void keel_detach(keel_channel *ch) {
  if (ch->base) {
    if (load(ch, KEEL_OFF_STRATEGY_PID) == (uint64_t)getpid()) store(ch, KEEL_OFF_STRATEGY_PID, 0);
    munmap(ch->base, ch->len);
  }
  if (ch->fd >= 0) close(ch->fd);
  ch->base = NULL;
  ch->fd = -1;
}

/* ----- names -------------------------------------------------------------------------- */

static uint64_t name_counts(const keel_channel *ch) { return load(ch, KEEL_OFF_NAME_COUNTS); }
unsigned keel_symbol_count(const keel_channel *ch) {
  return (unsigned)((name_counts(ch) >> 16) & 0xFFFF);
}
unsigned keel_venue_count(const keel_channel *ch) {
  return (unsigned)((name_counts(ch) >> 48) & 0xFFFF);
}

static int padded_name(const uint8_t *p, size_t width, char *out) {
  size_t n = width;
  while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == 0)) n--;
  memcpy(out, p, n);
  out[n] = 0;
  return 0;
}

int keel_symbol_name(const keel_channel *ch, unsigned index, char *out) {
  if (index >= keel_symbol_count(ch)) return -1;
  return padded_name(ch->base + KEEL_OFF_NAMES + (size_t)index * KEEL_SYMBOL_NAME_LEN,
                     KEEL_SYMBOL_NAME_LEN, out);
}

int keel_venue_name(const keel_channel *ch, unsigned index, char *out) {
  if (index >= keel_venue_count(ch)) return -1;
  size_t at = KEEL_OFF_NAMES + (size_t)keel_symbol_count(ch) * KEEL_SYMBOL_NAME_LEN +
              (size_t)index * KEEL_VENUE_NAME_LEN;
  return padded_name(ch->base + at, KEEL_VENUE_NAME_LEN, out);
}

/* "no symbol 'X': the engine's are A B C" into ch->error. */
static int no_such_name(keel_channel *ch, const char *what, const char *name, unsigned n,
                        int (*name_at)(const keel_channel *, unsigned, char *)) {
  size_t at = (size_t)snprintf(ch->error, sizeof ch->error, "no %s '%.32s': the engine's are", what,
                               name);
  char have[KEEL_VENUE_NAME_LEN + 1];
  for (unsigned i = 0; i < n && at < sizeof ch->error; i++) {
    name_at(ch, i, have);
    at += (size_t)snprintf(ch->error + at, sizeof ch->error - at, " %s", have);
  }
  return KEEL_ERR_NAME;
}

int keel_symbol_id(keel_channel *ch, const char *name) {
  char have[KEEL_VENUE_NAME_LEN + 1];
  for (unsigned i = 0; i < keel_symbol_count(ch); i++) {
    keel_symbol_name(ch, i, have);
    if (strcmp(have, name) == 0) return (int)i;
  }
  return no_such_name(ch, "symbol", name, keel_symbol_count(ch), keel_symbol_name);
}

int keel_venue_id(keel_channel *ch, const char *name) {
  char have[KEEL_VENUE_NAME_LEN + 1];
  for (unsigned i = 0; i < keel_venue_count(ch); i++) {
    keel_venue_name(ch, i, have);
    if (strcmp(have, name) == 0) return (int)i;
  }
  return no_such_name(ch, "venue", name, keel_venue_count(ch), keel_venue_name);
}

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t keel_table_fingerprint(const char *const *symbols, size_t n_symbols,
                                const char *const *venues, size_t n_venues) {
  uint64_t h = 0xcbf29ce484222325ull;
  const uint8_t zero = 0, one = 1;
  for (size_t i = 0; i < n_symbols; i++) {
    size_t n = strlen(symbols[i]);
    while (n > 0 && symbols[i][n - 1] == ' ') n--;
    h = fnv(h, (const uint8_t *)symbols[i], n);
    h = fnv(h, &zero, 1);
  }
  h = fnv(h, &one, 1);
  for (size_t i = 0; i < n_venues; i++) {
    h = fnv(h, (const uint8_t *)venues[i], strlen(venues[i]));
    h = fnv(h, &zero, 1);
  }
  return h == 0 ? 1 : h;
}

int keel_declare_table(keel_channel *ch, const char *const *symbols, size_t n_symbols,
                       const char *const *venues, size_t n_venues) {
  uint64_t mine = keel_table_fingerprint(symbols, n_symbols, venues, n_venues);
  uint64_t engine = load(ch, KEEL_OFF_CONFIG_FINGERPRINT);
  if (engine != 0 && engine != mine) {
    char listed[256] = "";
    size_t at = 0;
    char name[KEEL_VENUE_NAME_LEN + 1];
    for (unsigned i = 0; i < keel_symbol_count(ch) && at + 12 < sizeof listed; i++) {
      keel_symbol_name(ch, i, name);
      at += (size_t)snprintf(listed + at, sizeof listed - at, "%s%s", i ? "," : "", name);
    }
    return fail(ch, KEEL_ERR_TABLE,
                "the engine's symbol/venue table (fingerprint %016llx: %s) is not the one this "
                "strategy was built for (%016llx)",
                (unsigned long long)engine, listed, (unsigned long long)mine);
  }
  store(ch, KEEL_OFF_DECLARED_FINGERPRINT, mine);
  return KEEL_OK;
}

uint64_t keel_next_id(keel_channel *ch) {
  uint64_t floor = load(ch, KEEL_OFF_ID_FLOOR) & ((1ull << 48) - 1);
  if (ch->next_seq <= floor) ch->next_seq = floor + 1;
  uint64_t seq = ch->next_seq++;
  return (uint64_t)ch->strategy << 48 | seq;
}

/* ----- commands ------------------------------------------------------------------------ */

/* The engine's indices are checked as it checks ours: one that goes back or runs past ours
 * breaks the channel for this process. */
static int channel_usable(keel_channel *ch) {
  if (ch->fault) return KEEL_ERR_FAULT;
  uint64_t code = load(ch, KEEL_OFF_CHANNEL_FAULT);
  if (code != KEEL_FAULT_NONE) {
    ch->fault = 1;
    return fail(ch, KEEL_ERR_FAULT,
                "the engine declared the channel broken: fault %llu (found %llu, limit %llu)",
                (unsigned long long)code, (unsigned long long)load(ch, KEEL_OFF_FAULT_FOUND),
                (unsigned long long)load(ch, KEEL_OFF_FAULT_LIMIT));
  }
  return KEEL_OK;
}

static int publish(keel_channel *ch, uint8_t *r) {
  int usable = channel_usable(ch);
  if (usable != KEEL_OK) return usable;
  if (load(ch, KEEL_OFF_ENGINE_STATE) == KEEL_ENGINE_STOPPED)
    return fail(ch, KEEL_ERR_STOPPED, "the engine stopped (pid %llu): nothing reads commands",
                (unsigned long long)load(ch, KEEL_OFF_ENGINE_PID));
  uint64_t head = load(ch, KEEL_OFF_COMMAND_HEAD);
  if (head < ch->seen_command_head || head > ch->command_tail) {
    ch->fault = 1;
    return fail(ch, KEEL_ERR_FAULT, "the engine's command head %llu is not in %llu..=%llu",
                (unsigned long long)head, (unsigned long long)ch->seen_command_head,
                (unsigned long long)ch->command_tail);
  }
  ch->seen_command_head = head;
  if (ch->command_tail - head >= ch->command_capacity)
    return fail(ch, KEEL_FULL, "the command ring is full (%u records)", ch->command_capacity);
  uint64_t t = ch->command_tail;
  put_u64(r + 8, t);
  put_u32(r, keel_crc32(r + 4, KEEL_RECORD_LEN - 4));
  uint8_t *slot = ch->base + KEEL_HEADER_LEN + (size_t)(t & (ch->command_capacity - 1)) * KEEL_RECORD_LEN;
  memcpy(slot, r, KEEL_RECORD_LEN);
  ch->command_tail = t + 1;
  store(ch, KEEL_OFF_COMMAND_TAIL, t + 1);
  return KEEL_OK;
}

int keel_place(keel_channel *ch, uint64_t id, uint16_t venue, uint16_t symbol, unsigned side,
               uint32_t qty, int64_t price, unsigned tif, int reduce_only) {
  if (side != KEEL_SIDE_BUY && side != KEEL_SIDE_SELL)
    return fail(ch, KEEL_ERR_ARG, "side %u: 1 buy or 2 sell", side);
  if (tif != KEEL_TIF_DAY && tif != KEEL_TIF_IOC)
    return fail(ch, KEEL_ERR_ARG, "time in force %u: 1 day or 2 immediate-or-cancel", tif);
  uint8_t r[KEEL_RECORD_LEN] = {0};
  r[4] = KEEL_CMD_NEW;
  r[5] = (uint8_t)side;
  r[6] = (uint8_t)tif;
  r[7] = reduce_only ? KEEL_FLAG_REDUCE_ONLY : 0;
  put_u64(r + 16, id);
  put_u16(r + 24, venue);
  put_u16(r + 26, symbol);
  put_u32(r + 32, qty);
  put_u64(r + 40, (uint64_t)price);
  return publish(ch, r);
}

int keel_cancel(keel_channel *ch, uint64_t id) {
  uint8_t r[KEEL_RECORD_LEN] = {0};
  r[4] = KEEL_CMD_CANCEL;
  put_u64(r + 16, id);
  return publish(ch, r);
}

int keel_replace(keel_channel *ch, uint64_t id, uint64_t new_id, uint32_t qty, int64_t price) {
  uint8_t r[KEEL_RECORD_LEN] = {0};
  r[4] = KEEL_CMD_REPLACE;
  put_u64(r + 16, id);
  put_u64(r + 24, new_id);
  put_u32(r + 32, qty);
  put_u64(r + 40, (uint64_t)price);
  return publish(ch, r);
}

int keel_mass_cancel(keel_channel *ch, unsigned scope, uint16_t symbol) {
  if (scope != KEEL_SCOPE_STRATEGY && scope != KEEL_SCOPE_SYMBOL)
    return fail(ch, KEEL_ERR_ARG, "mass cancel scope %u: 1 strategy or 2 symbol", scope);
  uint8_t r[KEEL_RECORD_LEN] = {0};
  r[4] = KEEL_CMD_MASS_CANCEL;
  r[5] = (uint8_t)scope;
  put_u16(r + 26, symbol);
  return publish(ch, r);
}

/* ----- events -------------------------------------------------------------------------- */

int keel_poll(keel_channel *ch, keel_event *out) {
  int usable = channel_usable(ch);
  if (usable != KEEL_OK) return usable;
  uint64_t tail = load(ch, KEEL_OFF_EVENT_TAIL);
  if (tail < ch->seen_event_tail || tail - ch->event_head > ch->event_capacity) {
    ch->fault = 1;
    return fail(ch, KEEL_ERR_FAULT,
                "the engine's event tail %llu went back (was %llu) or ran past the ring",
                (unsigned long long)tail, (unsigned long long)ch->seen_event_tail);
  }
  ch->seen_event_tail = tail;
  if (tail == ch->event_head) return KEEL_EMPTY;
  uint64_t p = ch->event_head;
  uint8_t r[KEEL_RECORD_LEN];
  const uint8_t *slot = ch->base + KEEL_HEADER_LEN +
                        (size_t)ch->command_capacity * KEEL_RECORD_LEN +
                        (size_t)(p & (ch->event_capacity - 1)) * KEEL_RECORD_LEN;
  memcpy(r, slot, KEEL_RECORD_LEN);
  ch->event_head = p + 1;
  store(ch, KEEL_OFF_EVENT_HEAD, p + 1);
  uint32_t crc = keel_crc32(r + 4, KEEL_RECORD_LEN - 4);
  if (u32_at(r) != crc)
    return fail(ch, KEEL_ERR_RECORD, "event %llu: CRC %08x, computed %08x (skipped)",
                (unsigned long long)p, u32_at(r), crc);
  if (u64_at(r + 8) != p)
    return fail(ch, KEEL_ERR_RECORD, "event %llu claims position %llu (skipped)",
                (unsigned long long)p, (unsigned long long)u64_at(r + 8));
  if (r[4] == 0 || r[4] > KEEL_EV_KIND_MAX)
    return fail(ch, KEEL_ERR_RECORD, "event %llu: kind %u (skipped)", (unsigned long long)p, r[4]);
  memset(out, 0, sizeof *out);
  out->kind = r[4];
  out->position = p;
  if (r[4] == KEEL_EV_MALFORMED) {
    out->reason = r[5];
    out->malformed_position = u64_at(r + 24);
    out->malformed_value = u64_at(r + 32);
    return KEEL_OK;
  }
  out->id = u64_at(r + 16);
  out->engine_ns = u64_at(r + 48);
  switch (r[4]) {
    case KEEL_EV_PARTIALLY_FILLED:
      out->leaves = u32_at(r + 36);
      /* fall through */
    case KEEL_EV_FILLED:
      out->qty = u32_at(r + 32);
      out->price = (int64_t)u64_at(r + 40);
      break;
    case KEEL_EV_REPLACED:
      out->new_id = u64_at(r + 24);
      break;
    case KEEL_EV_REJECTED:
      out->reason = r[5];
      out->venue_code = r[6];
      break;
    case KEEL_EV_CANCEL_REJECTED:
    case KEEL_EV_REFUSED:
      out->reason = r[5];
      break;
    case KEEL_EV_BREAKER_OPEN:
      out->retry_after_ns = u64_at(r + 24);
      break;
    default:
      break;
  }
  return KEEL_OK;
}

/* ----- liveness ------------------------------------------------------------------------ */

void keel_heartbeat(keel_channel *ch) {
  __atomic_fetch_add(word(ch, KEEL_OFF_STRATEGY_HEARTBEAT), 1, __ATOMIC_RELEASE);
}

uint64_t keel_engine_state(const keel_channel *ch) { return load(ch, KEEL_OFF_ENGINE_STATE); }
uint64_t keel_engine_epoch(const keel_channel *ch) { return load(ch, KEEL_OFF_ENGINE_EPOCH); }
uint64_t keel_engine_pid(const keel_channel *ch) { return load(ch, KEEL_OFF_ENGINE_PID); }
uint64_t keel_engine_heartbeat(const keel_channel *ch) {
  return load(ch, KEEL_OFF_ENGINE_HEARTBEAT);
}
uint64_t keel_id_floor(const keel_channel *ch) { return load(ch, KEEL_OFF_ID_FLOOR); }
int keel_venue_synced(const keel_channel *ch, unsigned venue) {
  return venue < 64 && (load(ch, KEEL_OFF_VENUES_SYNCED) >> venue & 1);
}
uint64_t keel_engine_fault(const keel_channel *ch, uint64_t *found, uint64_t *limit) {
  if (found) *found = load(ch, KEEL_OFF_FAULT_FOUND);
  if (limit) *limit = load(ch, KEEL_OFF_FAULT_LIMIT);
  return load(ch, KEEL_OFF_CHANNEL_FAULT);
}

int keel_engine_live(keel_channel *ch, uint64_t stale_ns) {
  uint64_t beat = keel_engine_heartbeat(ch);
  uint64_t now = now_ns();
  if (beat != ch->seen_heartbeat) {
    ch->seen_heartbeat = beat;
    ch->heartbeat_moved_ns = now;
  }
  return keel_engine_state(ch) == KEEL_ENGINE_RUNNING &&
         load(ch, KEEL_OFF_CHANNEL_FAULT) == KEEL_FAULT_NONE &&
         process_exists(keel_engine_pid(ch)) && ch->heartbeat_moved_ns != 0 &&
         now - ch->heartbeat_moved_ns <= stale_ns;
}

/* ----- names --------------------------------------------------------------------------- */

const char *keel_event_kind_name(unsigned kind) {
  static const char *names[] = {"?",        "accepted", "partially filled", "filled",
                                "canceled", "replaced", "rejected",         "cancel rejected",
                                "unknown",  "shed",     "throttled",        "breaker open",
                                "refused",  "malformed"};
  return kind <= KEEL_EV_KIND_MAX ? names[kind] : "?";
}

static const struct {
  unsigned code;
  const char *name;
  int advice;
} REFUSALS[] = {
    {1, "not synced", KEEL_ADVICE_NEVER},
    {2, "risk qty", KEEL_ADVICE_NEVER},
    {3, "risk notional", KEEL_ADVICE_NEVER},
    {4, "risk position", KEEL_ADVICE_NEVER},
    {5, "unknown order on symbol", KEEL_ADVICE_NEVER},
    {6, "bulkhead symbol", KEEL_ADVICE_PAUSE},
    {7, "bulkhead venue", KEEL_ADVICE_PAUSE},
    {8, "cancel lane full", KEEL_ADVICE_PAUSE},
    {9, "replace lane full", KEEL_ADVICE_PAUSE},
    {10, "new lane full", KEEL_ADVICE_PAUSE},
    {11, "duplicate id", KEEL_ADVICE_NEVER},
    {12, "order table full", KEEL_ADVICE_NEVER},
    {13, "unknown order", KEEL_ADVICE_NEVER},
    {14, "already pending", KEEL_ADVICE_NEVER},
    {15, "executor stalled", KEEL_ADVICE_NEVER},
    {16, "journal unavailable", KEEL_ADVICE_NEVER},
    {17, "bad route", KEEL_ADVICE_NEVER},
    {18, "link read-only", KEEL_ADVICE_NEVER},
    {19, "risk price", KEEL_ADVICE_NEVER},
    {20, "session full", KEEL_ADVICE_NEVER},
    {21, "kill switch", KEEL_ADVICE_NEVER},
    {22, "strategy disabled", KEEL_ADVICE_NEVER},
    {23, "symbol shed", KEEL_ADVICE_NEVER},
    {30, "strategy rate", KEEL_ADVICE_PAUSE},
    {31, "strategy in flight", KEEL_ADVICE_PAUSE},
    {40, "reduce-only increases", KEEL_ADVICE_NEVER},
};

const char *keel_refusal_name(unsigned code) {
  for (size_t i = 0; i < sizeof REFUSALS / sizeof REFUSALS[0]; i++)
    if (REFUSALS[i].code == code) return REFUSALS[i].name;
  return "?";
}

int keel_refusal_advice(unsigned code) {
  for (size_t i = 0; i < sizeof REFUSALS / sizeof REFUSALS[0]; i++)
    if (REFUSALS[i].code == code) return REFUSALS[i].advice;
  return KEEL_ADVICE_NONE;
}

const char *keel_reject_name(unsigned code) {
  static const char *names[] = {"?",           "venue system",  "venue throttle", "invalid",
                                "duplicate id", "market closed", "not received",   "other"};
  return code <= KEEL_REJECT_OTHER ? names[code] : "?";
}

const char *keel_cancel_reject_name(unsigned code) {
  static const char *names[] = {"?", "too late", "unknown order", "venue system", "not applied"};
  return code <= KEEL_CANCEL_REJECT_NOT_APPLIED ? names[code] : "?";
}

const char *keel_result_name(int result) {
  switch (result) {
    case KEEL_OK: return "ok";
    case KEEL_EMPTY: return "empty";
    case KEEL_FULL: return "full";
    case KEEL_ERR_IO: return "io error";
    case KEEL_ERR_LAYOUT: return "layout";
    case KEEL_ERR_TABLE: return "symbol/venue table";
    case KEEL_ERR_FAULT: return "channel broken";
    case KEEL_ERR_NAME: return "no such name";
    case KEEL_ERR_RECORD: return "bad record";
    case KEEL_ERR_ARG: return "bad argument";
    case KEEL_ERR_STOPPED: return "engine stopped";
    case KEEL_ERR_IN_USE: return "channel in use";
    default: return "?";
  }
}

/* ----- market data --------------------------------------------------------------------- */

static uint64_t md_load(const keel_md *md, size_t off) {
  return __atomic_load_n((uint64_t *)(md->base + off), __ATOMIC_ACQUIRE);
}
static uint64_t md_relaxed(const keel_md *md, size_t off) {
  return __atomic_load_n((uint64_t *)(md->base + off), __ATOMIC_RELAXED);
}

int keel_md_attach(keel_md *md, const char *path, char *err, size_t err_len) {
  memset(md, 0, sizeof *md);
  int r = KEEL_OK;
  /* Read only: a reader can never disturb the engine or another reader. */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0) {
    snprintf(md->error, sizeof md->error, "%s: %s", path, strerror(errno));
    r = KEEL_ERR_IO;
    goto out;
  }
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < KEEL_HEADER_LEN) {
    snprintf(md->error, sizeof md->error, "%s: shorter than the %u-byte header", path,
             KEEL_HEADER_LEN);
    close(fd);
    r = KEEL_ERR_LAYOUT;
    goto out;
  }
  void *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    snprintf(md->error, sizeof md->error, "%s: mmap: %s", path, strerror(errno));
    r = KEEL_ERR_IO;
    goto out;
  }
  md->base = base;
  md->len = (size_t)st.st_size;
  const uint8_t *h = md->base;
  uint32_t version = u32_at(h + KEEL_MD_OFF_VERSION), symbols = u32_at(h + KEEL_MD_OFF_SYMBOLS),
           cap = u32_at(h + KEEL_MD_OFF_TRADE_CAPACITY), depth = u32_at(h + KEEL_MD_OFF_DEPTH);
  uint64_t want = KEEL_HEADER_LEN + (uint64_t)symbols * KEEL_MD_SLOT_LEN +
                  (uint64_t)cap * KEEL_MD_TRADE_LEN;
  if (memcmp(h, KEEL_MD_MAGIC "\0\0", 8) != 0) {
    snprintf(md->error, sizeof md->error, "%s: not a keel market-data file", path);
    r = KEEL_ERR_LAYOUT;
  } else if (version != KEEL_MD_VERSION || depth != KEEL_MD_DEPTH) {
    snprintf(md->error, sizeof md->error, "%s: version %u, depth %u (this library reads %u, %u)",
             path, version, depth, KEEL_MD_VERSION, KEEL_MD_DEPTH);
    r = KEEL_ERR_LAYOUT;
  } else if (symbols == 0 || symbols > KEEL_MD_SYMBOLS_MAX || !is_power_of_two(cap) ||
             cap > KEEL_CAPACITY_MAX || (uint64_t)st.st_size != want) {
    snprintf(md->error, sizeof md->error, "%s: %u symbols, capacity %u, %lld bytes", path,
             symbols, cap, (long long)st.st_size);
    r = KEEL_ERR_LAYOUT;
  }
  if (r != KEEL_OK) {
    munmap(md->base, md->len);
    md->base = NULL;
    goto out;
  }
  md->symbols = symbols;
  md->trade_capacity = cap;
  md->next = md_load(md, KEEL_MD_OFF_TRADES);
out:
  if (err && err_len) snprintf(err, err_len, "%s", r == KEEL_OK ? "" : md->error);
  return r;
}

void keel_md_detach(keel_md *md) {
  if (md->base) munmap(md->base, md->len);
  md->base = NULL;
}

int keel_md_synced(const keel_md *md) { return md_load(md, KEEL_MD_OFF_SYNCED) == 1; }

uint64_t keel_md_heartbeat(const keel_md *md) { return md_load(md, KEEL_MD_OFF_HEARTBEAT); }

int keel_md_top(keel_md *md, uint16_t symbol, keel_top *out) {
  if (symbol >= md->symbols) return KEEL_ERR_NAME;
  size_t slot = KEEL_HEADER_LEN + (size_t)symbol * KEEL_MD_SLOT_LEN;
  for (unsigned spins = 0; spins < KEEL_MD_SPINS_MAX; spins++) {
    uint64_t v1 = md_load(md, slot);
    if (v1 & 1) {
      md->retries++;
      continue;
    }
    out->seq = md_relaxed(md, slot + 8);
    for (unsigned i = 0; i < KEEL_MD_DEPTH; i++) {
      size_t w = slot + 16 + 32 * (size_t)i;
      out->bids[i].price = (int64_t)md_relaxed(md, w);
      out->bids[i].qty = md_relaxed(md, w + 8);
      out->asks[i].price = (int64_t)md_relaxed(md, w + 16);
      out->asks[i].qty = md_relaxed(md, w + 24);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (md_relaxed(md, slot) == v1) return KEEL_OK;
    md->retries++;
  }
  return KEEL_EMPTY;
}

int keel_md_next_trade(keel_md *md, keel_trade *out, uint64_t *lost) {
  uint64_t published = md_load(md, KEEL_MD_OFF_TRADES);
  uint64_t cap = md->trade_capacity;
  *lost = 0;
  if (published < md->next) {
    md->next = published;
    return KEEL_EMPTY;
  }
  if (published - md->next > cap) {
    *lost = published - cap - md->next;
    md->next = published - cap;
    return KEEL_MD_GAP;
  }
  if (published == md->next) return KEEL_EMPTY;
  uint64_t n = md->next;
  size_t at = KEEL_HEADER_LEN + (size_t)md->symbols * KEEL_MD_SLOT_LEN +
              (size_t)(n & (cap - 1)) * KEEL_MD_TRADE_LEN;
  uint64_t before = md_load(md, at);
  uint64_t word = md_relaxed(md, at + 8);
  out->seq = md_relaxed(md, at + 16);
  out->price = (int64_t)md_relaxed(md, at + 24);
  out->qty = md_relaxed(md, at + 32);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  uint64_t after = md_relaxed(md, at);
  if (before != n + 1 || after != n + 1) {
    uint64_t now = md_load(md, KEEL_MD_OFF_TRADES);
    uint64_t oldest = now > cap ? now - cap : 0;
    uint64_t resume = oldest > n + 1 ? oldest : n + 1;
    *lost = resume - n;
    md->next = resume;
    return KEEL_MD_GAP;
  }
  out->symbol = (uint16_t)(word & 0xFFFF);
  out->buy = ((word >> 16) & 0xFF) == 1;
  md->next = n + 1;
  return KEEL_OK;
}
