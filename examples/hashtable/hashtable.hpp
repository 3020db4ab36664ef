// A persistent chained hash table on tlptm: the data structure of the paper's workloads
// a / b / c (DESIGN.md §9).
//
// Every operation is one transaction (tlptm::atomic); called inside a running transaction it
// joins it, so a caller can group several operations (the driver's preload does). An insert
// allocates its node inside the transaction, so in the aalo and tlptm log modes the node's
// bytes are written in place and never logged: only the bucket head, the count and the
// allocator's bitmap byte are.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <tlptm/tlptm.hpp>

namespace tlptm_ht {

/// Stripes of the element count: each thread adds to its own stripe (alone in its cache line),
/// so concurrent inserts into different buckets never conflict on the count.
inline constexpr std::size_t size_stripes = 64;

/// The bucket count of a table asked for `requested` buckets: a power of two, at least 16.
constexpr std::uint64_t rounded_bucket_count(std::uint64_t requested) noexcept {
    return std::bit_ceil(requested < 16 ? std::uint64_t{16} : requested);
}

/// What bucket_index shifts by in a table of `bucket_count` buckets (a power of two).
constexpr int bucket_shift(std::uint64_t bucket_count) noexcept {
    return 64 - std::countr_zero(bucket_count);
}

/// The bucket of `key`, Fibonacci hashing: the top bits of key * 2^64 / phi (`shift` from
/// bucket_shift).
constexpr std::uint64_t bucket_index(std::uint64_t key, int shift) noexcept {
    return (key * 0x9E3779B97F4A7C15ull) >> shift;
}

/// A chain node: key, next, and the value inline (a V of any trivially copyable type).
template <class V> struct node {
    tlptm::p<std::uint64_t> key;
    tlptm::p<node*> next;
    tlptm::p<V> value;
};

/// One stripe of the element count. Threads count in different stripes; a stripe fills its
/// own span of orecs (tlptm::false_sharing_span), not only its own cache line: 64-byte stripes
/// made the inserts of two threads lock orecs in the same line (two-thread b: 1.47x one
/// thread; 1.67-1.90x so).
struct alignas(tlptm::false_sharing_span) size_stripe {
    tlptm::p<std::int64_t> n;
};

/// The pool's root: where the bucket array is, how many buckets it has, and the count.
template <class V> struct table_root {
    tlptm::p<tlptm::p<node<V>*>*> buckets;
    tlptm::p<std::uint64_t> bucket_count;
    size_stripe size[size_stripes];
};

/// The calling thread's stripe of the element count.
inline std::size_t this_thread_stripe() noexcept {
    static std::atomic<std::size_t> next{0};
    thread_local const std::size_t mine =
        next.fetch_add(1, std::memory_order_relaxed) % size_stripes;
    return mine;
}

/// A chained hash table of 64-bit keys and values of type V in a tlptm pool. The bucket count
/// is fixed at creation (a power of two). Thread-safe: any number of threads may call any
/// operation at once (tlptm's STM isolates them). The object itself is a volatile handle that
/// caches the root's immutable fields; the table lives in the pool.
template <class V> class hashtable {
public:
    using node_type = node<V>;
    using root_type = table_root<V>;

    /// Makes an empty table with `bucket_count` buckets (rounded up to a power of two, at least
    /// 16) in `pool`, whose root must not hold a table yet.
    /// @throw std::invalid_argument bucket_count is larger than 2^40
    /// @throw std::logic_error the pool already holds a table
    /// @throw tlptm::out_of_memory the pool has no room for the bucket array
    /// @throw tlptm::error (and subclasses) from the transaction
    static hashtable create(tlptm::pool& pool, std::uint64_t bucket_count) {
        if (bucket_count > (std::uint64_t{1} << 40))
            throw std::invalid_argument("tlptm_ht: at most 2^40 buckets");
        const std::uint64_t n = rounded_bucket_count(bucket_count);
        using bucket = tlptm::p<node_type*>;
        root_type* r = pool.root<root_type>();
        // The bucket array is allocated first; its count stays 0 (no table yet) until every
        // bucket is zeroed. The zeroing is spread over transactions of zero_chunk buckets so
        // that no log entry outgrows the ring in the modes that log it (baseline, cblo).
        bucket* b = tlptm::atomic(pool, [&](tlptm::tx& tx) {
            if (r->buckets.get() != nullptr)
                throw std::logic_error("tlptm_ht: the pool already holds a hash table");
            auto* a = static_cast<bucket*>(tx.alloc(n * sizeof(bucket)));
            r->buckets = a;
            return a;
        });
        static constexpr std::uint64_t zero_chunk = 2048;
        static const bucket zeros[zero_chunk] = {};
        for (std::uint64_t first = 0; first < n; first += zero_chunk)
            tlptm::atomic(pool, [&](tlptm::tx& tx) {
                tx.write(b + first, zeros, std::min(zero_chunk, n - first) * sizeof(bucket));
            });
        tlptm::atomic(pool, [&] { r->bucket_count = n; });
        return hashtable(pool, r);
    }

    /// Attaches to the table that create() made in `pool`.
    /// @throw std::runtime_error the pool's root holds no valid table
    static hashtable open(tlptm::pool& pool) {
        root_type* r = pool.root<root_type>();
        std::uint64_t n = r->bucket_count;
        if (r->buckets.get() == nullptr || n < 16 || !std::has_single_bit(n))
            throw std::runtime_error("tlptm_ht: the pool '" + pool.path() +
                                     "' holds no hash table (none was made, its creation did not "
                                     "finish, or its bucket count is not a power of two)");
        return hashtable(pool, r);
    }

    /// Inserts `key` with `value`. Returns false (and changes nothing) if the key is present.
    /// @throw tlptm::out_of_memory no room for the node (the transaction is aborted)
    bool insert(std::uint64_t key, const V& value) {
        return tlptm::atomic(*pool_, [&] {
            tlptm::p<node_type*>& head = buckets_[bucket_of(key)];
            for (node_type* n = head; n != nullptr; n = n->next)
                if (n->key == key)
                    return false;
            // AALO (modes aalo and tlptm): the node is allocated by this transaction, so its
            // bytes are written in place and flushed before the commit point, never logged.
            node_type* n = tlptm::make<node_type>(key, head.get(), value);
            head = n; // logged: with the count, the only stores of an insert to redo
            root_->size[this_thread_stripe()].n += 1;
            return true;
        });
    }

    /// Replaces the value of `key`. Returns false if the key is absent.
    bool update(std::uint64_t key, const V& value) {
        return tlptm::atomic(*pool_, [&] {
            node_type* n = find(key);
            if (n == nullptr)
                return false;
            n->value = value;
            return true;
        });
    }

    /// Replaces the value v of `key` by f(v) in one transaction and returns f(v), or nothing if
    /// the key is absent. f may run several times (on conflicts): it must have no side effects.
    ///
    /// The result leaves the transaction through a captured optional, not as the lambda's
    /// return value: g++ builds a returned std::optional<std::uint64_t> with a 1-byte store of
    /// its flag and then loads that byte as part of an 8-byte register. Such a load cannot take
    /// its byte from the store queue, and while the thread's previous commit is persisting, a
    /// store issued after that commit's fence cannot leave the queue: the load, and the whole
    /// transaction, waited for the previous persist. Updates of a table that fits in the caches
    /// took 184 ns with the returned optional and 174 ns without it (2-vCPU AMD EPYC guest,
    /// docs/design.md, "Where a transaction waits for the previous one's persist").
    template <class F> std::optional<V> update_with(std::uint64_t key, F&& f) {
        std::optional<V> out;
        tlptm::atomic(*pool_, [&] {
            node_type* n = find(key);
            if (n == nullptr) {
                out.reset(); // every attempt sets it: a retry may find what the first did not
                return;
            }
            V v = f(n->value.get());
            n->value = v;
            out = v;
        });
        return out;
    }

    /// The value of `key`, or nothing. A read-only transaction: no log, no flush, no fence.
    /// (The result leaves through a captured optional, as in update_with.)
    std::optional<V> lookup(std::uint64_t key) const {
        std::optional<V> out;
        tlptm::atomic(*pool_, [&] {
            node_type* n = find(key);
            if (n == nullptr)
                out.reset();
            else
                out = n->value.get();
        });
        return out;
    }

    /// Removes `key` and frees its node. Returns false if the key is absent.
    bool erase(std::uint64_t key) {
        return tlptm::atomic(*pool_, [&] {
            tlptm::p<node_type*>* link = &buckets_[bucket_of(key)];
            for (node_type* n = *link; n != nullptr; link = &n->next, n = *link) {
                if (n->key == key) {
                    *link = n->next.get();
                    root_->size[this_thread_stripe()].n -= 1;
                    tlptm::destroy(n);
                    return true;
                }
            }
            return false;
        });
    }

    /// The number of keys (read-only transaction over the count's stripes).
    std::uint64_t size() const {
        return tlptm::atomic(*pool_, [&] {
            std::int64_t total = 0;
            for (const size_stripe& s : root_->size)
                total += s.n;
            return static_cast<std::uint64_t>(total);
        });
    }

    std::uint64_t bucket_count() const noexcept { return mask_ + 1; }

    /// Counts the nodes of every chain (a consistency check of size(); one read-only
    /// transaction per 1024 buckets).
    std::uint64_t count_nodes() const {
        std::uint64_t total = 0;
        for (std::uint64_t first = 0; first <= mask_; first += 1024) {
            total += tlptm::atomic(*pool_, [&] {
                std::uint64_t c = 0;
                for (std::uint64_t b = first; b <= mask_ && b < first + 1024; ++b)
                    for (node_type* n = buckets_[b]; n != nullptr; n = n->next)
                        ++c;
                return c;
            });
        }
        return total;
    }

private:
    hashtable(tlptm::pool& pool, root_type* root)
        : pool_(&pool), root_(root), buckets_(root->buckets.get()),
          mask_(root->bucket_count.get() - 1), shift_(bucket_shift(root->bucket_count.get())) {}

    std::uint64_t bucket_of(std::uint64_t key) const noexcept { return bucket_index(key, shift_); }

    /// The node of `key` or nullptr (inside a transaction).
    node_type* find(std::uint64_t key) const {
        for (node_type* n = buckets_[bucket_of(key)]; n != nullptr; n = n->next)
            if (n->key == key)
                return n;
        return nullptr;
    }

    tlptm::pool* pool_;
    root_type* root_;
    tlptm::p<node_type*>* buckets_;
    std::uint64_t mask_;
    int shift_;
};

} // namespace tlptm_ht
