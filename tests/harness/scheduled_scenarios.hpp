// Crash-consistency harness: scenarios of several threads run under the scheduler
// (scheduler.hpp). Each worker is a function the scheduler runs on a thread of its own; the
// interleaving of their scheduling points is chosen by the seed (sweep_config::schedule), and the
// trace of the run is swept like any other (sweep.hpp).
//
// The scenarios aim at the places where a thread's decision depends on another thread's
// progress: a checkpoint in progress while another thread reuses a freed block (I2, I3), frees
// of blocks another thread allocated while a third reads them (oldest_active, I3), the
// settling of a deferred write-back by another thread, serial mode after repeated aborts, a
// thread that exits (its slot released, then reused), recover() and close() while other threads
// are bound, and a persistence failure in the middle of all that.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "scenarios.hpp"
#include "scheduler.hpp"
#include "sweep.hpp"

namespace tlptm_harness::scheduled {

using scenarios::blob;
using scenarios::blob_bytes;
using scenarios::named;
using scenarios::tiny_pool;

/// Fills the heap with spans of blob_bytes (recorded in `fill`) and frees the last `leave`
/// of them, so that exactly `leave` spans are free.
template <std::size_t N>
inline void fill_heap(tlptm::pool& p, tlptm::p<blob*> (&fill)[N], int leave) {
    int filled = 0;
    for (; filled < static_cast<int>(N); ++filled) {
        try {
            tlptm::atomic(p, [&](tlptm::tx& tx) {
                auto* b = static_cast<blob*>(tx.alloc(blob_bytes));
                b->key = 1000 + static_cast<std::uint64_t>(filled);
                fill[filled] = b;
            });
        } catch (const tlptm::out_of_memory&) {
            break;
        }
    }
    if (filled < leave)
        throw std::runtime_error("fill_heap: fewer spans fit in the pool than should be left");
    tlptm::atomic(p, [&](tlptm::tx& tx) {
        for (int k = filled - leave; k < filled; ++k) {
            tx.free(fill[k].get());
            fill[k] = nullptr;
        }
    });
}

/// Checks the fill spans and adds their bytes; false (with o.problem) on a bad pointer.
template <std::size_t N>
inline bool observe_fill(tlptm::pool& p, tlptm::p<blob*> (&fill)[N], observation& o) {
    for (auto& f : fill) {
        if (blob* b = f.get()) {
            std::string why;
            std::uint64_t size = allocated_block(p, b, why);
            if (size == 0) {
                o.problem = "fill span: " + why;
                return false;
            }
            o.reachable_bytes += size;
        }
    }
    return true;
}

/// Key and value of the blob at `b` (0, 0 for null), its bytes added; false on a bad pointer.
inline bool observe_blob(tlptm::pool& p, blob* b, const char* what, observation& o) {
    if (!b) {
        o.state.push_back(0);
        o.state.push_back(0);
        return true;
    }
    std::string why;
    std::uint64_t size = allocated_block(p, b, why);
    if (size == 0) {
        o.problem = std::string(what) + ": " + why;
        return false;
    }
    o.reachable_bytes += size;
    o.state.push_back(b->key.get());
    o.state.push_back(b->value.get());
    return true;
}

// ---- a checkpoint in progress while another thread reuses a freed span (item 1 of issue 11) -----

struct cr_root {
    tlptm::p<std::uint64_t> w[64];
    tlptm::p<blob*> fill[8];
    tlptm::p<blob*> slot;
    tlptm::p<std::uint64_t> marker;
};

/// Worker 0 rewrites all 64 root words per transaction (0.6-1.5 KiB entries): its ring wraps
/// every few transactions, and every wrap runs checkpoint(), which settles worker 1's deferred
/// write-back and persists CT. Worker 1, on a heap with one free span, allocates X, updates it
/// (logged) and frees it, three times: each allocation after the first must get X again, so it
/// must wait until a durable CT covers the free. If it trusts a CT worker 0 has stored but not
/// yet made durable (mutation volatile_ct), a crash replays the logged update of X over the new
/// object. Worker 0 starts after the first free; after each free worker 1 lets the other run
/// (scheduler::wait). The values an allocation writes differ from every logged update's.
inline scenario checkpoint_reclaim(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("checkpoint-reclaim", mode);
    s.options = tiny_pool(mode);
    s.threads = 2;
    s.setup = [](tlptm::pool& p) { fill_heap(p, p.root<cr_root>()->fill, 1); };
    s.observe = [](tlptm::pool& p) {
        observation o;
        cr_root* rt = p.root<cr_root>();
        o.reachable_bytes = root_bytes(p);
        for (auto& w : rt->w)
            o.state.push_back(w.get());
        if (!observe_fill(p, rt->fill, o) || !observe_blob(p, rt->slot.get(), "slot", o))
            return o;
        o.state.push_back(rt->marker.get());
        return o;
    };
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        cr_root* rt = p.root<cr_root>();
        std::atomic<bool> freed{false};
        sch.run({
            [&, n](int) {
                while (!freed.load()) // starts once worker 1 has freed a span
                    scheduler::wait();
                for (int k = 1; k <= n; ++k) {
                    auto kk = static_cast<std::uint64_t>(k);
                    rec.atomic(
                        p,
                        [&] {
                            for (std::uint64_t i = 0; i < 64; ++i)
                                rt->w[i] = mix64(kk * 64 + i);
                        },
                        [kk](digest& d) {
                            for (std::uint64_t i = 0; i < 64; ++i)
                                d[i] = mix64(kk * 64 + i);
                        });
                }
            },
            [&](int) {
                blob* x = nullptr;
                for (std::uint64_t c = 1; c <= 3; ++c) {
                    blob* y = nullptr;
                    rec.atomic(
                        p,
                        [&](tlptm::tx& tx) {
                            y = static_cast<blob*>(tx.alloc(blob_bytes));
                            y->key = c;
                            y->value = 100 * c + 1; // never a value an older update wrote
                            rt->slot = y;
                        },
                        [c](digest& d) { d[64] = c, d[65] = 100 * c + 1; });
                    if (x && y != x) // the one free span: the freed one, once I3 allows
                        throw std::runtime_error("checkpoint-reclaim: the freed span was not "
                                                 "handed out again, the scenario does not test "
                                                 "I3");
                    x = y;
                    rec.atomic(
                        p, [&] { rt->slot.get()->value = 100 * c + 2; },
                        [c](digest& d) { d[65] = 100 * c + 2; });
                    rec.atomic(
                        p,
                        [&](tlptm::tx& tx) {
                            tx.free(rt->slot.get());
                            rt->slot = nullptr;
                        },
                        [](digest& d) { d[64] = 0, d[65] = 0; });
                    freed.store(true);
                    scheduler::wait(); // other work: the ring-wrapping thread runs
                }
                rec.atomic(
                    p, [&] { rt->marker = 1; }, [](digest& d) { d[66] = 1; });
            },
        });
    };
    return s;
}

// ---- cross-thread frees and reuse while a reader runs (I3, oldest_active) ---------------------

struct xf_root {
    tlptm::p<blob*> fill[8];
    tlptm::p<blob*> slot;
    tlptm::p<std::uint64_t> count[2];
};

/// Worker 0 allocates a span into the shared slot when it is empty (its own stores into it are
/// AALO: in place, unlogged), worker 1 frees whatever is there: the spans of one thread are freed
/// by the other and handed out again as soon as I3 allows. Worker 2 reads the slot's span in
/// transactions that yield between its words: a span must not be reused while a transaction
/// that began before its free still runs (oldest_active), or the reader sees a key of one
/// object with the value of another. Two spans are free at the start.
inline scenario cross_free(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("cross-free", mode);
    s.options = tiny_pool(mode);
    s.threads = 3;
    s.setup = [](tlptm::pool& p) { fill_heap(p, p.root<xf_root>()->fill, 2); };
    s.observe = [](tlptm::pool& p) {
        observation o;
        xf_root* rt = p.root<xf_root>();
        o.reachable_bytes = root_bytes(p);
        if (!observe_fill(p, rt->fill, o) || !observe_blob(p, rt->slot.get(), "slot", o))
            return o;
        o.state.push_back(rt->count[0].get());
        o.state.push_back(rt->count[1].get());
        return o;
    };
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        xf_root* rt = p.root<xf_root>();
        std::atomic<int> writers_done{0};
        std::atomic<std::uint64_t> torn{0};
        std::string torn_example;
        sch.run({
            [&, n](int) {
                for (int k = 1; k <= n; ++k) {
                    auto key = static_cast<std::uint64_t>(k);
                    auto made = std::make_shared<bool>(false);
                    rec.atomic(
                        p,
                        [&, made](tlptm::tx& tx) {
                            *made = false;
                            if (!rt->slot.get()) {
                                try {
                                    auto* b = static_cast<blob*>(tx.alloc(blob_bytes));
                                    b->key = key;
                                    b->value = ~key;
                                    rt->slot = b;
                                    *made = true;
                                } catch (const tlptm::out_of_memory&) {
                                    // I3 holds every free back (a reader runs): skip this one.
                                }
                            }
                            rt->count[0] += 1;
                        },
                        [made, key](digest& d) {
                            if (*made)
                                d[0] = key, d[1] = ~key;
                            d[2] += 1;
                        });
                }
                writers_done.fetch_add(1);
            },
            [&, n](int) {
                for (int k = 1; k <= n; ++k) {
                    auto freed = std::make_shared<bool>(false);
                    rec.atomic(
                        p,
                        [&, freed](tlptm::tx& tx) {
                            *freed = false;
                            if (blob* b = rt->slot.get()) {
                                tx.free(b);
                                rt->slot = nullptr;
                                *freed = true;
                            }
                            rt->count[1] += 1;
                        },
                        [freed](digest& d) {
                            if (*freed)
                                d[0] = 0, d[1] = 0;
                            d[3] += 1;
                        });
                }
                writers_done.fetch_add(1);
            },
            [&, n](int) {
                // Read-only transactions (not part of the model): what they see must be one
                // object, never a span being reused under them.
                for (int k = 0; k < 2 * n && writers_done.load() < 2; ++k) {
                    scheduler::yield(point::tx_begin, nullptr);
                    tlptm::atomic(p, [&] {
                        blob* b = rt->slot.get();
                        if (!b)
                            return;
                        scheduler::yield();
                        std::uint64_t key = b->key.get();
                        scheduler::yield();
                        std::uint64_t value = b->value.get();
                        if (value != ~key && torn.fetch_add(1) == 0)
                            torn_example =
                                "key " + std::to_string(key) + ", value " + std::to_string(value);
                    });
                }
            },
        });
        if (torn.load() > 0)
            throw std::runtime_error(
                "cross-free: a reader saw a span reused while it was reading it (" +
                std::to_string(torn.load()) + " times, first " + torn_example +
                "): I3's "
                "oldest_active half is broken");
    };
    return s;
}

// ---- words in the root: settle by a helper, serial mode, slot reuse, recover and close ----------

struct words3_root {
    tlptm::p<std::uint64_t> own[3][8]; ///< one line per worker
    tlptm::p<std::uint64_t> shared;
    tlptm::p<std::uint64_t> big[64];
};

inline observation observe_words3(tlptm::pool& p) {
    observation o;
    words3_root* rt = p.root<words3_root>();
    for (auto& row : rt->own)
        for (auto& w : row)
            o.state.push_back(w.get());
    o.state.push_back(rt->shared.get());
    for (auto& w : rt->big)
        o.state.push_back(w.get());
    o.reachable_bytes = root_bytes(p);
    return o;
}

inline scenario words3(const char* what, tlptm::log_mode mode, unsigned threads) {
    scenario s;
    s.name = named(what, mode);
    s.options = tiny_pool(mode);
    s.threads = threads;
    s.setup = [](tlptm::pool& p) { p.root<words3_root>(); };
    s.observe = observe_words3;
    return s;
}

/// Transaction k of worker t: one word of its own line, and (if `shared`) the shared counter.
inline void own_tx(tlptm::pool& p, recorder& rec, std::size_t t, std::uint64_t k, bool shared,
                   int yields = 0) {
    words3_root* rt = p.root<words3_root>();
    std::size_t i = k % 8;
    std::uint64_t v = (t + 1) * 1000 + k;
    rec.atomic(
        p,
        [&] {
            if (shared) {
                std::uint64_t c = rt->shared.get();
                for (int y = 0; y < yields; ++y)
                    scheduler::yield();
                rt->shared = c + 1;
            }
            rt->own[t][i] = v;
        },
        [t, i, v, shared](digest& d) {
            d[t * 8 + i] = v;
            if (shared)
                d[24] += 1;
        });
}

/// A transaction that rewrites the 64 big words: its entry is 0.6-1.5 KiB, so the worker's
/// ring wraps (checkpoint, settling every other slot's deferred write-back) every few of them.
inline void big_tx(tlptm::pool& p, recorder& rec, std::uint64_t k) {
    words3_root* rt = p.root<words3_root>();
    rec.atomic(
        p,
        [&] {
            for (std::uint64_t i = 0; i < 64; ++i)
                rt->big[i] = mix64(k * 64 + i);
        },
        [k](digest& d) {
            for (std::uint64_t i = 0; i < 64; ++i)
                d[25 + i] = mix64(k * 64 + i);
        });
}

/// Worker 0 commits a few transactions and then stays bound without committing, so its last
/// write-back stays unfenced (deferred F2); worker 1's ring wraps, and each of its checkpoints
/// must settle worker 0's write-back (flush it again, fence) before CT passes it.
inline scenario settle_helper(tlptm::log_mode mode, int n) {
    scenario s = words3("settle-helper", mode, 2);
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        std::atomic<bool> done{false};
        sch.run({
            [&](int) {
                for (std::uint64_t k = 1; k <= 3; ++k)
                    own_tx(p, rec, 0, k, k == 2);
                while (!done.load())
                    scheduler::wait();
            },
            [&, n](int) {
                for (int k = 1; k <= n; ++k)
                    big_tx(p, rec, static_cast<std::uint64_t>(k));
                own_tx(p, rec, 1, 1, true);
                done.store(true);
            },
        });
    };
    return s;
}

/// Worker 0 commits small transactions one after another; worker 1 checkpoints over and over
/// (as a thread whose ring wraps or that reclaims frees does): each checkpoint settles worker
/// 0's deferred write-back, so worker 0's next commit publishes a fresh in_flight bound, and a
/// checkpoint that reads the clock after that commit took its timestamp but before the bound
/// is visible must not let CT reach the timestamp (mutation late_in_flight).
inline scenario in_flight_race(tlptm::log_mode mode, int n) {
    scenario s = words3("in-flight-race", mode, 2);
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        std::atomic<bool> done{false};
        sch.run({
            [&, n](int) {
                for (int k = 1; k <= n; ++k)
                    own_tx(p, rec, 0, static_cast<std::uint64_t>(k), false);
                done.store(true);
            },
            [&](int) {
                tlptm::detail::persist_ctx ctx; // a checkpointer's own, like a thread slot's
                while (!done.load()) {
                    p.state_ptr()->checkpoint(ctx);
                    scheduler::yield();
                }
            },
        });
    };
    return s;
}

/// Three workers increment the shared counter with scheduling points between its read and its
/// write: their transactions conflict, and one that aborts 16 times in a row runs alone (serial
/// mode, an exclusive section the others wait for). `serial` counts the calls that ran their
/// body more than 16 times.
inline scenario serial_mode(tlptm::log_mode mode, int n, std::shared_ptr<std::atomic<int>> serial) {
    scenario s = words3("serial-mode", mode, 3);
    s.scheduled = [n, serial](tlptm::pool& p, recorder& rec, scheduler& sch) {
        words3_root* rt = p.root<words3_root>();
        auto worker = [&, n](int t) {
            for (int k = 1; k <= n; ++k) {
                auto tt = static_cast<std::size_t>(t);
                auto kk = static_cast<std::uint64_t>(k);
                std::size_t i = kk % 8;
                std::uint64_t v = (tt + 1) * 1000 + kk;
                int attempts = 0;
                rec.atomic(
                    p,
                    [&] {
                        ++attempts;
                        std::uint64_t c = rt->shared.get();
                        scheduler::yield();
                        rt->own[tt][i] = v;
                        scheduler::yield();
                        rt->shared = c + 1;
                    },
                    [tt, i, v](digest& d) {
                        d[tt * 8 + i] = v;
                        d[24] += 1;
                    });
                if (attempts > static_cast<int>(tlptm::serial_after_aborts))
                    serial->fetch_add(1);
            }
        };
        sch.run({worker, worker, worker});
    };
    return s;
}

/// Worker 0 runs its transactions on three threads one after the other: each exits (the library
/// settles its write-back and releases its slot), and the next takes a slot again (the same
/// ring, continued). Worker 1 wraps its ring meanwhile.
inline scenario slot_reuse(tlptm::log_mode mode, int n) {
    scenario s = words3("slot-reuse", mode, 2);
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        sch.run({
            [&](int) {
                for (std::uint64_t phase = 0; phase < 3; ++phase)
                    sch.in_new_thread([&] {
                        for (std::uint64_t k = 1; k <= 2; ++k)
                            own_tx(p, rec, 0, phase * 2 + k, k == 2);
                    });
            },
            [&, n](int) {
                for (int k = 1; k <= n; ++k) {
                    big_tx(p, rec, static_cast<std::uint64_t>(k));
                    own_tx(p, rec, 1, static_cast<std::uint64_t>(k), true);
                }
            },
        });
    };
    return s;
}

/// Three workers on a pool of two slots: a thread holds its slot between its transactions, so
/// the third takes an idle one from its holder (revoke, heavy fence) or waits for one; the
/// holder's next transaction then goes to another slot. Each worker commits to its own line
/// and, every other transaction, to the shared counter (conflicts between the slots' commits
/// and the thief's).
inline scenario slot_steal(tlptm::log_mode mode, int n) {
    scenario s = words3("slot-steal", mode, 3);
    s.options.max_threads = 2;
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        auto worker = [&, n](int t) {
            for (int k = 1; k <= n; ++k)
                own_tx(p, rec, static_cast<std::size_t>(t), static_cast<std::uint64_t>(k),
                       k % 2 == 0);
        };
        sch.run({worker, worker, worker});
    };
    return s;
}

/// Worker 1 calls pool.recover() while worker 0 is bound and committing (recover waits for
/// running transactions, checkpoints, runs recovery), then, once worker 0 has finished its
/// first transactions but is still bound, closes the pool and opens it again (the traced
/// recovery of the reopening is part of the trace). Worker 0 then commits on the reopened
/// pool (a new slot).
inline scenario recover_close(tlptm::log_mode mode, int n) {
    scenario s = words3("recover-close", mode, 2);
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        std::atomic<bool> first_done{false}, reopened{false};
        sch.run({
            [&, n](int) {
                for (int k = 1; k <= n; ++k)
                    own_tx(p, rec, 0, static_cast<std::uint64_t>(k), k % 2 == 0);
                first_done.store(true);
                while (!reopened.load())
                    scheduler::wait();
                for (int k = n + 1; k <= n + 2; ++k)
                    own_tx(p, rec, 0, static_cast<std::uint64_t>(k), true);
            },
            [&](int) {
                own_tx(p, rec, 1, 1, true);
                tlptm::recovery_report r = p.recover();
                if (r.entries_replayed != 0)
                    throw std::runtime_error("recover-close: recover() on an open pool "
                                             "replayed " +
                                             std::to_string(r.entries_replayed) + " entries");
                own_tx(p, rec, 1, 2, true);
                while (!first_done.load())
                    scheduler::wait();
                rec.reopen(p); // worker 0 is still bound to the pool being closed
                reopened.store(true);
                own_tx(p, rec, 1, 3, true);
            },
        });
    };
    return s;
}

// ---- a persistence failure (item 2 of issue 11) -------------------------------------------------

struct fault_root {
    tlptm::p<std::uint64_t> own[3][8];
    tlptm::p<std::uint64_t> shared;
    tlptm::p<blob*> obj[3];
};

/// Three workers commit on their own lines and a shared counter; every other transaction also
/// replaces the worker's small object (tlptm::make: AALO stores covered by the entry; the old
/// one is freed). Run with tracer_options::fail_fence: one fence throws, as a failed msync does.
/// The failing atomic throws, every transaction that starts later throws pool_error, no lock or
/// in_flight leaks, no thread hangs, and every crash image (reopening included) recovers a
/// per-thread prefix that holds every returned transaction.
inline scenario fault(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("fault", mode);
    s.options = tiny_pool(mode);
    s.threads = 3;
    s.setup = [](tlptm::pool& p) { p.root<fault_root>(); };
    s.observe = [](tlptm::pool& p) {
        observation o;
        fault_root* rt = p.root<fault_root>();
        o.reachable_bytes = root_bytes(p);
        for (auto& row : rt->own)
            for (auto& w : row)
                o.state.push_back(w.get());
        o.state.push_back(rt->shared.get());
        for (auto& b : rt->obj)
            if (!observe_blob(p, b.get(), "object", o))
                return o;
        return o;
    };
    s.scheduled = [n](tlptm::pool& p, recorder& rec, scheduler& sch) {
        fault_root* rt = p.root<fault_root>();
        auto worker = [&, n](int t) {
            auto tt = static_cast<std::size_t>(t);
            for (int k = 1; k <= n; ++k) {
                auto kk = static_cast<std::uint64_t>(k);
                std::size_t i = kk % 8;
                std::uint64_t v = (tt + 1) * 1000 + kk;
                bool make = k % 2 == 0, shared = k % 3 == 0;
                rec.atomic(
                    p,
                    [&] {
                        rt->own[tt][i] = v;
                        if (shared)
                            rt->shared += 1;
                        if (make) {
                            if (blob* old = rt->obj[tt].get())
                                tlptm::destroy(old);
                            rt->obj[tt] = tlptm::make<blob>(v, v * 3);
                        }
                    },
                    [tt, i, v, shared, make](digest& d) {
                        d[tt * 8 + i] = v;
                        if (shared)
                            d[24] += 1;
                        if (make)
                            d[25 + 2 * tt] = v, d[26 + 2 * tt] = v * 3;
                    });
            }
        };
        sch.run({worker, worker, worker});
    };
    return s;
}

} // namespace tlptm_harness::scheduled
