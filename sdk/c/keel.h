/*
 * keel.h: a strategy's side of keel's shared-memory channel (docs/ipc.md), for C and C++.
 *
 * One file per strategy, `<ipc.dir>/strategy-<id>`, mapped by the engine (`keel run`) and by
 * the strategy: a 4096-byte header and two rings of 64-byte records, commands (strategy to
 * engine) and events (engine to strategy). No lock and no system call per message.
 *
 * Every number here is checked against the engine's Rust definitions by a test
 * (core/cli/tests/sdk_c.rs): a change on one side fails it.
 *
 *   keel_channel ch;
 *   char err[256];
 *   if (keel_attach(&ch, "/dev/shm/keel/strategy-0", err, sizeof err) != KEEL_OK) ...
 *   int msft = keel_symbol_id(&ch, "MSFT");
 *   uint64_t id = keel_next_id(&ch);
 *   keel_place(&ch, id, 0, msft, KEEL_SIDE_BUY, 100, 1002500, KEEL_TIF_DAY, 0);
 *   keel_event ev;
 *   while (keel_poll(&ch, &ev) == KEEL_OK) ... keel_event_kind_name(ev.kind) ...
 *   keel_heartbeat(&ch);   (at least every 100 ms)
 *   keel_detach(&ch);
 *
 * The library is not thread-safe: one thread per channel (the channel has one writer).
 */
#ifndef KEEL_H
#define KEEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ----- layout ------------------------------------------------------------------------- */

#define KEEL_MAGIC "KEELSHM" /* 8 bytes with its NUL */
#define KEEL_VERSION 1u
#define KEEL_RECORD_LEN 64u
#define KEEL_HEADER_LEN 4096u
#define KEEL_CAPACITY_MAX (1u << 20)
#define KEEL_SYMBOL_NAME_LEN 8u
#define KEEL_VENUE_NAME_LEN 16u

/* Header offsets (bytes). Every word is a u64 on its own 8-byte boundary unless noted. */
#define KEEL_OFF_MAGIC 0u
#define KEEL_OFF_VERSION 8u            /* u32 */
#define KEEL_OFF_RECORD_LEN 12u        /* u32 */
#define KEEL_OFF_COMMAND_CAPACITY 16u  /* u32 */
#define KEEL_OFF_EVENT_CAPACITY 20u    /* u32 */
#define KEEL_OFF_STRATEGY 24u          /* u16 */
#define KEEL_OFF_ENGINE_HEARTBEAT 64u
#define KEEL_OFF_ENGINE_EPOCH 72u
#define KEEL_OFF_ENGINE_STATE 80u
#define KEEL_OFF_ID_FLOOR 88u
#define KEEL_OFF_VENUES_SYNCED 96u
#define KEEL_OFF_ENGINE_PID 104u
#define KEEL_OFF_CHANNEL_FAULT 112u
#define KEEL_OFF_STRATEGY_HEARTBEAT 128u
#define KEEL_OFF_STRATEGY_PID 136u
#define KEEL_OFF_DECLARED_FINGERPRINT 144u
#define KEEL_OFF_COMMAND_TAIL 192u
#define KEEL_OFF_COMMAND_HEAD 256u
#define KEEL_OFF_EVENT_TAIL 320u
#define KEEL_OFF_EVENT_HEAD 384u
#define KEEL_OFF_FAULT_FOUND 448u
#define KEEL_OFF_FAULT_LIMIT 456u
#define KEEL_OFF_CONFIG_FINGERPRINT 512u
#define KEEL_OFF_NAME_COUNTS 1024u
#define KEEL_OFF_NAMES 1032u

/* Engine states (header word KEEL_OFF_ENGINE_STATE). */
#define KEEL_ENGINE_ABSENT 0u
#define KEEL_ENGINE_STARTING 1u
#define KEEL_ENGINE_RUNNING 2u
#define KEEL_ENGINE_STOPPED 3u

/* Channel faults the engine declares (KEEL_OFF_CHANNEL_FAULT). */
#define KEEL_FAULT_NONE 0u
#define KEEL_FAULT_COMMAND_TAIL_BACK 1u
#define KEEL_FAULT_COMMAND_TAIL_BEYOND 2u
#define KEEL_FAULT_EVENT_HEAD_BACK 3u
#define KEEL_FAULT_EVENT_HEAD_BEYOND 4u
#define KEEL_FAULT_TABLE 5u

/* Record bytes: 0..4 CRC-32 of 4..64, 4 kind, 5 side/reason, 6 tif/venue code, 7 flags,
 * 8..16 ring position, 16.. payload. */
#define KEEL_CMD_NEW 1u
#define KEEL_CMD_CANCEL 2u
#define KEEL_CMD_REPLACE 3u
#define KEEL_CMD_MASS_CANCEL 4u

#define KEEL_SIDE_BUY 1u
#define KEEL_SIDE_SELL 2u
#define KEEL_TIF_DAY 1u
#define KEEL_TIF_IOC 2u
#define KEEL_FLAG_REDUCE_ONLY 1u
#define KEEL_SCOPE_STRATEGY 1u
#define KEEL_SCOPE_SYMBOL 2u

#define KEEL_EV_ACCEPTED 1u
#define KEEL_EV_PARTIALLY_FILLED 2u
#define KEEL_EV_FILLED 3u
#define KEEL_EV_CANCELED 4u
#define KEEL_EV_REPLACED 5u
#define KEEL_EV_REJECTED 6u
#define KEEL_EV_CANCEL_REJECTED 7u
#define KEEL_EV_UNKNOWN 8u
#define KEEL_EV_SHED 9u
#define KEEL_EV_THROTTLED 10u
#define KEEL_EV_BREAKER_OPEN 11u
#define KEEL_EV_REFUSED 12u
#define KEEL_EV_MALFORMED 13u
#define KEEL_EV_KIND_MAX 13u

/* Rejected by the venue (event reason). */
#define KEEL_REJECT_VENUE_SYSTEM 1u
#define KEEL_REJECT_VENUE_THROTTLE 2u
#define KEEL_REJECT_INVALID 3u
#define KEEL_REJECT_DUPLICATE_ID 4u
#define KEEL_REJECT_MARKET_CLOSED 5u
#define KEEL_REJECT_NOT_RECEIVED 6u
#define KEEL_REJECT_OTHER 7u /* the venue's own code in keel_event.venue_code */

/* Cancel rejected (event reason). */
#define KEEL_CANCEL_REJECT_TOO_LATE 1u
#define KEEL_CANCEL_REJECT_UNKNOWN_ORDER 2u
#define KEEL_CANCEL_REJECT_VENUE_SYSTEM 3u
#define KEEL_CANCEL_REJECT_NOT_APPLIED 4u

/* Refused by keel (event reason): codes that never change. */
#define KEEL_REFUSED_NOT_SYNCED 1u
#define KEEL_REFUSED_RISK_QTY 2u
#define KEEL_REFUSED_RISK_NOTIONAL 3u
#define KEEL_REFUSED_RISK_POSITION 4u
#define KEEL_REFUSED_UNKNOWN_ORDER_ON_SYMBOL 5u
#define KEEL_REFUSED_BULKHEAD_SYMBOL 6u
#define KEEL_REFUSED_BULKHEAD_VENUE 7u
#define KEEL_REFUSED_CANCEL_LANE_FULL 8u
#define KEEL_REFUSED_REPLACE_LANE_FULL 9u
#define KEEL_REFUSED_NEW_LANE_FULL 10u
#define KEEL_REFUSED_DUPLICATE_ID 11u
#define KEEL_REFUSED_ORDER_TABLE_FULL 12u
#define KEEL_REFUSED_UNKNOWN_ORDER 13u
#define KEEL_REFUSED_ALREADY_PENDING 14u
#define KEEL_REFUSED_EXECUTOR_STALLED 15u
#define KEEL_REFUSED_JOURNAL_UNAVAILABLE 16u
#define KEEL_REFUSED_BAD_ROUTE 17u
#define KEEL_REFUSED_LINK_READ_ONLY 18u
#define KEEL_REFUSED_RISK_PRICE 19u
#define KEEL_REFUSED_SESSION_FULL 20u
#define KEEL_REFUSED_KILL_SWITCH 21u
#define KEEL_REFUSED_STRATEGY_DISABLED 22u
#define KEEL_REFUSED_SYMBOL_SHED 23u
#define KEEL_REFUSED_STRATEGY_RATE 30u
#define KEEL_REFUSED_STRATEGY_IN_FLIGHT 31u
#define KEEL_REFUSED_REDUCE_ONLY_INCREASES 40u

/* What a strategy should do about a refusal (keel_refusal_advice). */
#define KEEL_ADVICE_NONE 0  /* not a refusal code */
#define KEEL_ADVICE_PAUSE 1 /* transient capacity: send a new order again after a pause */
#define KEEL_ADVICE_NEVER 2 /* final: never retry the same order */

/* A malformed command (event reason): what was wrong with the record. */
#define KEEL_MALFORMED_CHECKSUM 1u
#define KEEL_MALFORMED_POSITION 2u
#define KEEL_MALFORMED_FIELD 3u

/* Prices are fixed point with 4 decimals (100.25 is 1002500). */
#define KEEL_PRICE_SCALE 10000

/* ----- the library ---------------------------------------------------------------------- */

/* Results. Negative values are errors; the channel's `error` text says what and which value. */
#define KEEL_OK 0
#define KEEL_EMPTY 1 /* keel_poll: no event now */
#define KEEL_FULL 2  /* the command ring is full: retry later (nothing was written) */
#define KEEL_ERR_IO (-1)
#define KEEL_ERR_LAYOUT (-2)  /* not a channel file, or another version, size or record length */
#define KEEL_ERR_TABLE (-3)   /* the engine's symbol/venue table is not the one declared */
#define KEEL_ERR_FAULT (-4)   /* the channel is broken (an index that cannot be trusted) */
#define KEEL_ERR_NAME (-5)    /* no such symbol or venue */
#define KEEL_ERR_RECORD (-6)  /* an event record failed its checks (skipped) */
#define KEEL_ERR_ARG (-7)     /* a bad argument (side, time in force, scope) */
#define KEEL_ERR_STOPPED (-8) /* the engine stopped: nothing will read the command */
#define KEEL_ERR_IN_USE (-9)  /* another live process writes this channel */

/* One event, decoded. Fields a kind does not carry are 0. */
typedef struct keel_event {
  uint8_t kind;        /* KEEL_EV_* */
  uint8_t reason;      /* rejected, cancel rejected, refused, malformed: the reason code */
  uint8_t venue_code;  /* rejected with KEEL_REJECT_OTHER: the venue's own code */
  uint64_t id;         /* the order */
  uint64_t new_id;     /* replaced: the replacement's id */
  uint32_t qty;        /* partially filled, filled: shares in this fill */
  uint32_t leaves;     /* partially filled: shares still open */
  int64_t price;       /* partially filled, filled: the fill's price */
  uint64_t retry_after_ns; /* breaker open */
  uint64_t malformed_position; /* malformed: the ring position of the refused command */
  uint64_t malformed_value;    /* malformed: the position it claimed, or the field's value */
  uint64_t engine_ns;  /* the engine's monotonic time when it wrote the event */
  uint64_t position;   /* this event's position in the event ring */
} keel_event;

/* An attached channel. Read the fields; change them only through the functions. */
typedef struct keel_channel {
  uint8_t *base;
  size_t len;
  int fd;
  uint16_t strategy;
  uint32_t command_capacity;
  uint32_t event_capacity;
  uint64_t command_tail;   /* ours: records published */
  uint64_t event_head;     /* ours: records consumed */
  uint64_t seen_command_head; /* the engine's, as last read (it never goes back) */
  uint64_t seen_event_tail;
  uint64_t next_seq;       /* the next order id sequence keel_next_id gives */
  uint64_t seen_heartbeat; /* keel_engine_live's memory */
  uint64_t heartbeat_moved_ns;
  int fault;               /* a client-side fault: the channel is no longer used */
  char error[256];         /* the last error, with the values found */
} keel_channel;

/* Maps the channel file at `path` and checks it: magic, version, record length, capacities,
 * size, indices; refuses a channel another live process writes. `err` (may be NULL) gets the
 * reason. */
int keel_attach(keel_channel *ch, const char *path, char *err, size_t err_len);
void keel_detach(keel_channel *ch);

/* Symbols and venues by name, from the table the engine wrote: the index, or KEEL_ERR_NAME
 * with ch->error listing the engine's names. */
int keel_symbol_id(keel_channel *ch, const char *name);
int keel_venue_id(keel_channel *ch, const char *name);
unsigned keel_symbol_count(const keel_channel *ch);
unsigned keel_venue_count(const keel_channel *ch);
/* The listed name at `index` into `out` (at least 17 bytes), without padding; 0 or -1. */
int keel_symbol_name(const keel_channel *ch, unsigned index, char *out);
int keel_venue_name(const keel_channel *ch, unsigned index, char *out);

/* The fingerprint of a symbol/venue table (FNV-1a 64, docs/ipc.md). */
uint64_t keel_table_fingerprint(const char *const *symbols, size_t n_symbols,
                                const char *const *venues, size_t n_venues);
/* Declares the table this strategy was built for; KEEL_ERR_TABLE (nothing declared) when it
 * is not the engine's. */
int keel_declare_table(keel_channel *ch, const char *const *symbols, size_t n_symbols,
                       const char *const *venues, size_t n_venues);

/* A fresh order id (strategy << 48 | sequence, above the engine's id floor). */
uint64_t keel_next_id(keel_channel *ch);

/* Commands: KEEL_OK (published), KEEL_FULL, or an error. */
int keel_place(keel_channel *ch, uint64_t id, uint16_t venue, uint16_t symbol, unsigned side,
               uint32_t qty, int64_t price, unsigned tif, int reduce_only);
int keel_cancel(keel_channel *ch, uint64_t id);
int keel_replace(keel_channel *ch, uint64_t id, uint64_t new_id, uint32_t qty, int64_t price);
int keel_mass_cancel(keel_channel *ch, unsigned scope, uint16_t symbol);

/* The next event: KEEL_OK (in `out`), KEEL_EMPTY, KEEL_ERR_RECORD (a bad record, skipped),
 * KEEL_ERR_FAULT. */
int keel_poll(keel_channel *ch, keel_event *out);

/* The strategy's heartbeat: call it at least every 100 ms. */
void keel_heartbeat(keel_channel *ch);

/* The engine's header words. */
uint64_t keel_engine_state(const keel_channel *ch);
uint64_t keel_engine_epoch(const keel_channel *ch);
uint64_t keel_engine_pid(const keel_channel *ch);
uint64_t keel_engine_heartbeat(const keel_channel *ch);
uint64_t keel_id_floor(const keel_channel *ch);
int keel_venue_synced(const keel_channel *ch, unsigned venue);
/* The fault the engine declared (KEEL_FAULT_*), with the offending value and its limit. */
uint64_t keel_engine_fault(const keel_channel *ch, uint64_t *found, uint64_t *limit);
/* Whether the engine is live: running, no fault, its process exists, and its heartbeat moved
 * within `stale_ns` (on this process's monotonic clock; false until it has seen it move). */
int keel_engine_live(keel_channel *ch, uint64_t stale_ns);

/* Names, as the engine's Rust definitions spell them ("?" for an unknown code). */
const char *keel_event_kind_name(unsigned kind);
const char *keel_refusal_name(unsigned code);
int keel_refusal_advice(unsigned code);
const char *keel_reject_name(unsigned code);
const char *keel_cancel_reject_name(unsigned code);
const char *keel_result_name(int result);

/* ----- market data: one file per feed, <[ipc] dir>/md-<feed> (docs/ipc.md) ------------- */

#define KEEL_MD_MAGIC "KEELMD" /* 8 bytes, NUL padded */
#define KEEL_MD_VERSION 1u
#define KEEL_MD_DEPTH 5u
#define KEEL_MD_SLOT_LEN 192u
#define KEEL_MD_TRADE_LEN 64u
#define KEEL_MD_SYMBOLS_MAX 65535u
#define KEEL_MD_OFF_VERSION 8u
#define KEEL_MD_OFF_SYMBOLS 12u
#define KEEL_MD_OFF_TRADE_CAPACITY 16u
#define KEEL_MD_OFF_DEPTH 20u
#define KEEL_MD_OFF_HEARTBEAT 64u
#define KEEL_MD_OFF_SYNCED 72u
#define KEEL_MD_OFF_TRADES 128u

typedef struct keel_level {
  int64_t price;
  uint64_t qty;
} keel_level;

/* A top of book: the best KEEL_MD_DEPTH levels a side (price 0, qty 0 where shorter). */
typedef struct keel_top {
  uint64_t seq; /* the book's sequence number */
  keel_level bids[KEEL_MD_DEPTH];
  keel_level asks[KEEL_MD_DEPTH];
} keel_top;

typedef struct keel_trade {
  uint16_t symbol;
  int buy;      /* the aggressor bought */
  uint64_t seq; /* the venue's trade sequence number */
  int64_t price;
  uint64_t qty;
} keel_trade;

typedef struct keel_md {
  uint8_t *base;
  size_t len;
  uint32_t symbols;
  uint32_t trade_capacity;
  uint64_t next; /* the next trade to read */
  uint64_t retries;
  char error[256];
} keel_md;

/* Maps the market-data file read-only and checks it; starts at the newest trade. */
int keel_md_attach(keel_md *md, const char *path, char *err, size_t err_len);
void keel_md_detach(keel_md *md);
/* Every book in step with the venue (1), or the feed connecting or resyncing, or the engine
 * stopped (0: a top may be stale). */
int keel_md_synced(const keel_md *md);
/* The engine's feed heartbeat: it moves while the engine runs. */
uint64_t keel_md_heartbeat(const keel_md *md);
/* A slot found mid-write this many reads in a row: the writer is preempted inside it, or died
 * there. */
#define KEEL_MD_SPINS_MAX 1000000u
/* `symbol`'s newest top of book, never torn: KEEL_OK, KEEL_ERR_NAME for no such symbol, or
 * KEEL_EMPTY if the writer stayed in the slot KEEL_MD_SPINS_MAX reads in a row (try again; if
 * keel_md_heartbeat stopped too, the engine died mid-write). */
int keel_md_top(keel_md *md, uint16_t symbol, keel_top *out);
/* The next trade: KEEL_OK (in `out`), KEEL_EMPTY, or KEEL_MD_GAP with `*lost` trades that were
 * overwritten before they were read (the next call goes on from the oldest still there). */
#define KEEL_MD_GAP 3
int keel_md_next_trade(keel_md *md, keel_trade *out, uint64_t *lost);

/* CRC-32 (IEEE, as zlib.crc32) of `len` bytes. */
uint32_t keel_crc32(const uint8_t *bytes, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_H */
