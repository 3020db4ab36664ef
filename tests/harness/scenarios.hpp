// Crash-consistency harness: the workloads whose crashes the sweep checks.
//
// Every scenario creates a tiny pool (320 KiB: 4 log rings of 8 KiB, a heap of four
// superblocks, one of them the root's), so that an image is cheap to write and recover and
// the log rings wrap after a few transactions. Each transaction is run through
// recorder::atomic with its effect on the reference model; observe() reads the pool without
// trusting it (pointers are checked against the allocator's persistent metadata).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "pool_file.hpp"
#include "sweep.hpp"

namespace tlptm_harness::scenarios {

/// 320 KiB pool, 4 thread slots with 8 KiB log rings, a 64 KiB root.
inline tlptm::pool_options tiny_pool(tlptm::log_mode mode) {
    tlptm::pool_options o;
    o.size = std::size_t{320} << 10;
    o.max_threads = 4;
    o.log_capacity = 4096;
    o.root_capacity = std::size_t{64} << 10;
    o.mode = mode;
    return o;
}

inline std::string named(const char* what, tlptm::log_mode mode) {
    return std::string(what) + "/" + tlptm::to_string(mode);
}

// ---- words in the root: single-word, multi-word, partial-word and ring-wrapping transactions ---

struct words_root {
    tlptm::p<std::uint64_t> w[64];
    tlptm::p<std::uint32_t> half[4]; ///< two per word: partial-word records
};

inline observation observe_words(tlptm::pool& p) {
    observation o;
    words_root* rt = p.root<words_root>();
    for (auto& w : rt->w)
        o.state.push_back(w.get());
    for (auto& h : rt->half)
        o.state.push_back(h.get());
    o.reachable_bytes = root_bytes(p);
    return o;
}

inline void setup_words(tlptm::pool& p) {
    p.root<words_root>();
}

/// Each transaction writes one word of the root.
inline scenario single_word(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("single-word", mode);
    s.options = tiny_pool(mode);
    s.setup = setup_words;
    s.observe = observe_words;
    s.run = [n](tlptm::pool& p, recorder& rec) {
        words_root* rt = p.root<words_root>();
        for (int k = 1; k <= n; ++k) {
            std::size_t i = static_cast<std::size_t>(k * 7) % 16;
            std::uint64_t v = static_cast<std::uint64_t>(k) * 1000 + i;
            rec.atomic(
                p, [&] { rt->w[i] = v; }, [i, v](digest& d) { d[i] = v; });
        }
    };
    return s;
}

/// Each transaction writes eight words over four cache lines and half of a word.
inline scenario multi_word(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("multi-word", mode);
    s.options = tiny_pool(mode);
    s.setup = setup_words;
    s.observe = observe_words;
    s.run = [n](tlptm::pool& p, recorder& rec) {
        words_root* rt = p.root<words_root>();
        for (int k = 1; k <= n; ++k) {
            auto kk = static_cast<std::uint64_t>(k);
            std::size_t h = static_cast<std::size_t>(k) % 4;
            rec.atomic(
                p,
                [&] {
                    for (std::size_t j = 0; j < 8; ++j)
                        rt->w[(kk + 4 * j) % 32] = kk << 32 | j;
                    rt->half[h] = static_cast<std::uint32_t>(kk * 3);
                },
                [kk, h](digest& d) {
                    for (std::size_t j = 0; j < 8; ++j)
                        d[(kk + 4 * j) % 32] = kk << 32 | j;
                    d[64 + h] = kk * 3;
                });
        }
    };
    return s;
}

/// Each transaction rewrites all 64 words with large values: entries of 0.6 to 1.5 KiB, so
/// the 8 KiB rings wrap (checkpoint, new generation) every 5 to 13 transactions.
inline scenario ring_wrap(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("ring-wrap", mode);
    s.options = tiny_pool(mode);
    s.setup = setup_words;
    s.observe = observe_words;
    s.run = [n](tlptm::pool& p, recorder& rec) {
        words_root* rt = p.root<words_root>();
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
    };
    return s;
}

// ---- a linked list: allocate and publish (AALO), update, unlink and free ------------------------

struct node {
    tlptm::p<std::uint64_t> key, value;
    tlptm::p<node*> next;
};

struct list_root {
    tlptm::p<node*> head;
    tlptm::p<std::uint64_t> count;
};

/// Walks a list of nodes from `head` without trusting it; appends key and value per node.
inline void walk_list(tlptm::pool& p, node* head, observation& o) {
    std::size_t len = 0;
    std::size_t at = o.state.size();
    o.state.push_back(0);
    for (node* n = head; n != nullptr; n = n->next.get()) {
        std::string why;
        std::uint64_t size = allocated_block(p, n, why);
        if (size == 0) {
            o.problem = "list node " + std::to_string(len) + ": " + why;
            return;
        }
        if (++len > 1000) {
            o.problem = "list longer than 1000 nodes (a cycle?)";
            return;
        }
        o.reachable_bytes += size;
        o.state.push_back(n->key.get());
        o.state.push_back(n->value.get());
    }
    o.state[at] = len;
}

inline observation observe_list(tlptm::pool& p) {
    observation o;
    list_root* rt = p.root<list_root>();
    o.reachable_bytes = root_bytes(p);
    o.state.push_back(rt->count.get());
    walk_list(p, rt->head.get(), o);
    return o;
}

/// Transactions push new nodes (tlptm::make, then AALO stores into them), update the first
/// node (a logged store into an old node), and pop and free the first node.
inline scenario list(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("list", mode);
    s.options = tiny_pool(mode);
    s.setup = [](tlptm::pool& p) { p.root<list_root>(); };
    s.observe = observe_list;
    s.run = [n](tlptm::pool& p, recorder& rec) {
        list_root* rt = p.root<list_root>();
        for (int k = 1; k <= n; ++k) {
            auto kk = static_cast<std::uint64_t>(k);
            switch (k % 4) {
            case 1:
            case 2:
                rec.atomic(
                    p,
                    [&] {
                        node* x = tlptm::make<node>(kk, kk * 11, rt->head.get());
                        x->value = kk * 13; // a second AALO store into the new node
                        rt->head = x;
                        rt->count += 1;
                    },
                    [kk](digest& d) {
                        d[0] += 1;
                        d[1] += 1;
                        d.insert(d.begin() + 2, {kk, kk * 13});
                    });
                break;
            case 3:
                rec.atomic(
                    p, [&] { rt->head.get()->value = kk * 17; },
                    [kk](digest& d) { d[3] = kk * 17; });
                break;
            default:
                rec.atomic(
                    p,
                    [&] {
                        node* x = rt->head.get();
                        rt->head = x->next.get();
                        tlptm::destroy(x);
                        rt->count -= 1;
                    },
                    [](digest& d) {
                        d[0] -= 1;
                        d[1] -= 1;
                        d.erase(d.begin() + 2, d.begin() + 4);
                    });
                break;
            }
        }
    };
    return s;
}

// ---- free and reuse (I3) ------------------------------------------------------------------------

/// The start of a span of one superblock.
struct blob {
    tlptm::p<std::uint64_t> key, value;
};
inline constexpr std::size_t blob_bytes = 40000; // more than half a superblock: a span

struct reuse_root {
    tlptm::p<blob*> fill[8];
    tlptm::p<blob*> slot;
    tlptm::p<std::uint64_t> marker;
};

inline observation observe_reuse(tlptm::pool& p) {
    observation o;
    reuse_root* rt = p.root<reuse_root>();
    o.reachable_bytes = root_bytes(p);
    std::uint64_t filled = 0;
    for (auto& f : rt->fill) {
        if (blob* b = f.get()) {
            std::string why;
            std::uint64_t size = allocated_block(p, b, why);
            if (size == 0) {
                o.problem = "fill span: " + why;
                return o;
            }
            o.reachable_bytes += size;
            ++filled;
        }
    }
    blob* b = rt->slot.get();
    if (b) {
        std::string why;
        std::uint64_t size = allocated_block(p, b, why);
        if (size == 0) {
            o.problem = "slot span: " + why;
            return o;
        }
        o.reachable_bytes += size;
    }
    o.state = {b ? b->key.get() : 0, b ? b->value.get() : 0, rt->marker.get(), filled};
    return o;
}

/// A full heap but for one span. X is allocated and written (AALO), then updated by a logged
/// store, then freed; the next allocation must get X again (the only free span) and writes it
/// in place (AALO, unlogged). Replaying the update of X over the new contents would break I3:
/// the library must advance CT past the free before it hands X out.
inline scenario free_reuse(tlptm::log_mode mode) {
    scenario s;
    s.name = named("free-reuse", mode);
    s.options = tiny_pool(mode);
    s.setup = [](tlptm::pool& p) {
        reuse_root* rt = p.root<reuse_root>();
        int filled = 0;
        for (; filled < 8; ++filled) {
            try {
                tlptm::atomic(p, [&](tlptm::tx& tx) {
                    auto* b = static_cast<blob*>(tx.alloc(blob_bytes));
                    b->key = 1000 + static_cast<std::uint64_t>(filled);
                    rt->fill[filled] = b;
                });
            } catch (const tlptm::out_of_memory&) {
                break;
            }
        }
        if (filled == 0)
            throw std::runtime_error("free-reuse: no span fits in the pool");
        tlptm::atomic(p, [&](tlptm::tx& tx) { // leave exactly one span free
            tx.free(rt->fill[filled - 1].get());
            rt->fill[filled - 1] = nullptr;
        });
    };
    s.observe = observe_reuse;
    s.run = [](tlptm::pool& p, recorder& rec) {
        reuse_root* rt = p.root<reuse_root>();
        blob* x = nullptr;
        rec.atomic(
            p,
            [&](tlptm::tx& tx) {
                x = static_cast<blob*>(tx.alloc(blob_bytes));
                x->key = 1;
                x->value = 100;
                rt->slot = x;
            },
            [](digest& d) { d[0] = 1, d[1] = 100; });
        rec.atomic(
            p, [&] { rt->slot.get()->value = 200; }, [](digest& d) { d[1] = 200; });
        rec.atomic(
            p,
            [&](tlptm::tx& tx) {
                tx.free(rt->slot.get());
                rt->slot = nullptr;
            },
            [](digest& d) { d[0] = 0, d[1] = 0; });
        blob* y = nullptr;
        rec.atomic(
            p,
            [&](tlptm::tx& tx) {
                y = static_cast<blob*>(tx.alloc(blob_bytes));
                y->key = 2;
                y->value = 300;
                rt->slot = y;
            },
            [](digest& d) { d[0] = 2, d[1] = 300; });
        if (y != x)
            throw std::runtime_error("free-reuse: the freed span was not handed out again, "
                                     "the scenario does not test I3");
        rec.atomic(
            p, [&] { rt->marker = 1; }, [](digest& d) { d[2] = 1; });
    };
    return s;
}

// ---- several threads ----------------------------------------------------------------------------

struct threads_root {
    tlptm::p<std::uint64_t> own[2][8]; ///< one cache line per thread
    tlptm::p<std::uint64_t> shared;    ///< incremented by both: conflicting transactions
};

inline observation observe_threads(tlptm::pool& p) {
    observation o;
    threads_root* rt = p.root<threads_root>();
    for (auto& row : rt->own)
        for (auto& w : row)
            o.state.push_back(w.get());
    o.state.push_back(rt->shared.get());
    o.reachable_bytes = root_bytes(p);
    return o;
}

/// Two threads, n transactions each: each writes a word of its own line, every third also
/// increments a shared counter.
inline scenario two_threads(tlptm::log_mode mode, int n) {
    scenario s;
    s.name = named("two-threads", mode);
    s.options = tiny_pool(mode);
    s.threads = 2;
    s.setup = [](tlptm::pool& p) { p.root<threads_root>(); };
    s.observe = observe_threads;
    s.run = [n](tlptm::pool& p, recorder& rec) {
        threads_root* rt = p.root<threads_root>();
        std::atomic<int> ready{0};
        auto worker = [&](std::size_t t) {
            // Start together, and let the other thread in between transactions, so that the
            // commits interleave (the tracer serialises the persistence calls, not the commits).
            ready.fetch_add(1);
            while (ready.load() < 2)
                std::this_thread::yield();
            for (int k = 1; k <= n; ++k) {
                std::this_thread::yield();
                std::size_t i = static_cast<std::size_t>(k) % 8;
                std::uint64_t v = (t + 1) * 1000 + static_cast<std::uint64_t>(k);
                bool shared = k % 3 == 0;
                rec.atomic(
                    p,
                    [&] {
                        rt->own[t][i] = v;
                        if (shared)
                            rt->shared += 1;
                    },
                    [t, i, v, shared](digest& d) {
                        d[t * 8 + i] = v;
                        if (shared)
                            d[16] += 1;
                    });
            }
        };
        std::exception_ptr failed[2];
        std::thread a([&] {
            try {
                worker(0);
            } catch (...) {
                failed[0] = std::current_exception();
            }
        });
        std::thread b([&] {
            try {
                worker(1);
            } catch (...) {
                failed[1] = std::current_exception();
            }
        });
        a.join();
        b.join();
        for (auto& f : failed)
            if (f)
                std::rethrow_exception(f);
    };
    return s;
}

} // namespace tlptm_harness::scenarios
