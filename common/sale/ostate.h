/* ostate: the states of an order as its buyer sees them, declared once (issue #56).
 *
 * An order's state is spelt in three alphabets: a letter in its item's orders
 * hash (keys.h KEYS_ITEM_ORDERS, the field "o:ORDER"), which the Lua functions
 * write and compare and the producer's status calls read; a word in
 * orders.status (the CHECK orders_status_known of
 * sql/migrations/008_order_life.sql); and the word the buyer's status calls
 * answer (docs/api.md). OST_STATES gives each state all three, and what the
 * code decides by: whether it holds a unit of the item, whether it is final,
 * which function writes it into Redis, and what the last field of its value
 * holds. Every C site that needs a letter or a word asks this table;
 * tests/unit/test_ostate.c holds it against the migration's CHECK, the Lua
 * that reads and writes the letters and the rebuild's SQL
 * (ctl/sql/item_states.sql), as tests/unit/test_outcomes.c holds the buy
 * outcomes against theirs.
 *
 * The module also owns the codec of the orders hash's value,
 * "USER|S|RESERVED_MS|SETTLED_MS|DETAIL" (S a letter of the table).
 *
 * No state: any thread may call it. */
#ifndef SECKILL_OSTATE_H
#define SECKILL_OSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether a state is final: nothing changes it any more. */
enum ost_final {
    OST_OPEN,  /* it moves on */
    OST_FINAL, /* never changes again */
    /* Final for an item without a payment window; for an item with one it
     * is the short gap between the consumer's settlement and its mark
     * pending payment (a failover between the two can make it last), so
     * not final: PostgreSQL decides (producer/cancel.h). */
    OST_FINAL_WITHOUT_WINDOW,
};

/* The Redis function that writes a state into the orders hash. */
enum ost_writer {
    OST_BY_RESERVE, /* seckill_reserve (producer/lua/seckill_producer.lua), with the reservation */
    OST_BY_SETTLE,  /* seckill_settle (consumer/lua/seckill_consumer.lua): what PostgreSQL did with it */
    OST_BY_MARK,    /* seckill_mark (consumer/lua/seckill_return.lua): the order's life after the sale */
};

/* What DETAIL, a value's last field, holds. */
enum ost_detail {
    OST_DETAIL_NONE,   /* empty */
    OST_DETAIL_REASON, /* the refusal's reason (queue.h cmsg_reason: [a-z_]+) */
    OST_DETAIL_MS,     /* a time in ms since the epoch: the end of the payment window ('w'), else
                        * when the state began */
};

/* Every state an order shows its buyer, in its life's order.
 * X(name, letter, PostgreSQL word, JSON word, holds a unit, final, writer, detail)
 *   name     the constant OST_<name>
 *   letter   its letter in the orders hash
 *   PG word  orders.status (NULL: none; a queued order is not in the database
 *            yet, a refused one lives in order_rejections, not orders)
 *   JSON     the "status" of the buyer's status calls (docs/api.md)
 *   unit     1 when the order holds a unit of the item: a reservation, an
 *            order persisted or paid; a refused order never had one, an
 *            expired or cancelled one gave it back (order_returns)
 *   final    enum ost_final
 *   writer   enum ost_writer: which function writes the letter; the
 *            settlement writes SETTLED_MS, a mark keeps the one it found
 *   detail   enum ost_detail
 * 'c' is persisted: 'final' in orders.status, final for an item without a
 * payment window. For an item with one, the consumer marks it 'w' right
 * after it settles it, so 'c' is then the gap before 'w' (OST_FINAL_WITHOUT_WINDOW). */
/* clang-format off */
#define OST_STATES(X)                                                                                   \
    X(QUEUED,          'q', NULL,              "queued",          1, OST_OPEN,                          \
      OST_BY_RESERVE, OST_DETAIL_NONE)                                                                  \
    X(CONFIRMED,       'c', "final",           "confirmed",       1, OST_FINAL_WITHOUT_WINDOW,          \
      OST_BY_SETTLE,  OST_DETAIL_NONE)                                                                  \
    X(REFUSED,         'r', NULL,              "refused",         0, OST_FINAL,                         \
      OST_BY_SETTLE,  OST_DETAIL_REASON)                                                                \
    X(PENDING_PAYMENT, 'w', "pending_payment", "pending_payment", 1, OST_OPEN,                          \
      OST_BY_MARK,    OST_DETAIL_MS)                                                                    \
    X(PAID,            'p', "paid",            "paid",            1, OST_FINAL,                         \
      OST_BY_MARK,    OST_DETAIL_MS)                                                                    \
    X(EXPIRED,         'x', "expired",         "expired",         0, OST_FINAL,                         \
      OST_BY_MARK,    OST_DETAIL_MS)                                                                    \
    X(CANCELLED,       'k', "cancelled",       "cancelled",       0, OST_FINAL,                         \
      OST_BY_MARK,    OST_DETAIL_MS)
/* clang-format on */

enum ost_state {
    OST_NONE = -1, /* no state of the table (an outcome never written to Redis, a letter unknown) */
#define OST_ENUM(name, letter, pg, json, unit, final, writer, detail) OST_##name,
    OST_STATES(OST_ENUM)
#undef OST_ENUM
    OST_NSTATES
};

/* A state's columns; s must be one of the table's (not OST_NONE). */
char ost_letter(enum ost_state s);
const char *ost_pg_word(enum ost_state s); /* NULL: none */
const char *ost_json_word(enum ost_state s);
bool ost_holds_unit(enum ost_state s);
enum ost_writer ost_writer(enum ost_state s);
enum ost_detail ost_detail(enum ost_state s);
/* Whether s is final, for an order of an item that has a payment window
 * (item_pays) or not. */
bool ost_final(enum ost_state s, bool item_pays);

/* The state of a letter, or of a PostgreSQL word (NULL is none); OST_NONE
 * when the table has no such one. */
enum ost_state ost_of_letter(char letter);
enum ost_state ost_of_pg_word(const char *word);

/* Room for one field of a value, its NUL included. */
#define OST_FIELD_MAX 24

/* An orders-hash value, decoded. */
struct ost_value {
    int64_t user_id;
    enum ost_state state;
    int64_t reserved_ms;
    int64_t settled_ms; /* 0: not settled (the field is empty) */
    int64_t detail_ms;  /* OST_DETAIL_MS: the time DETAIL says; else 0 */
    char reason[OST_FIELD_MAX]; /* OST_DETAIL_REASON: the refusal's reason; else "" */
};

/* Decode the value v (len bytes, not NUL-terminated) into *out. 0, or -1
 * when it is not one: not five fields, a field of OST_FIELD_MAX bytes or
 * more, a number out of range (the user from 1, the times from 0, a DETAIL
 * time from 1), a letter the table lacks, or fields its state does not
 * have: a queued order has neither SETTLED_MS nor DETAIL, a settled one
 * ('c', 'r') has SETTLED_MS, DETAIL is what its state's detail says; a
 * state seckill_mark wrote keeps the SETTLED_MS it found, empty or not. */
int ost_decode(const char *v, size_t len, struct ost_value *out);

#endif
