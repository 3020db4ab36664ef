// The same chained hash table on PMDK's libpmemobj transactions (the C API), as the peer that
// tlptm is compared with. Same algorithm as hashtable.hpp: insert at the head of the chain,
// one count, one transaction per operation. libpmemobj's transactions are undo-logged:
// pmemobj_tx_add_range_direct snapshots a range before it is changed; memory allocated by the
// transaction needs no snapshot. Single-threaded use only (libpmemobj does not isolate
// concurrent transactions).
#pragma once

#include <libpmemobj.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace pmdk_ht {

/// A libpmemobj call failed; the message carries pmemobj_errormsg().
class pmdk_error : public std::runtime_error {
public:
    explicit pmdk_error(const std::string& what)
        : std::runtime_error("libpmemobj: " + what + ": " + pmemobj_errormsg()) {}
};

/// Runs f() as one libpmemobj transaction and returns its result. An exception from f aborts
/// the transaction (every snapshotted range is restored) and propagates.
/// @throw pmdk_error the transaction could not begin or was aborted by libpmemobj
template <class F> auto transaction(PMEMobjpool* pop, F&& f) -> std::invoke_result_t<F&> {
    using R = std::invoke_result_t<F&>;
    if (pmemobj_tx_begin(pop, nullptr, TX_PARAM_NONE) != 0)
        throw pmdk_error("pmemobj_tx_begin");
    std::optional<std::conditional_t<std::is_void_v<R>, char, R>> result;
    try {
        if constexpr (std::is_void_v<R>)
            f();
        else
            result.emplace(f());
    } catch (...) {
        // Also after a failed pmemobj_tx_* call, which has already aborted the transaction.
        if (pmemobj_tx_stage() == TX_STAGE_WORK)
            pmemobj_tx_abort(ECANCELED);
        pmemobj_tx_end();
        throw;
    }
    if (pmemobj_tx_stage() == TX_STAGE_WORK)
        pmemobj_tx_commit();
    if (int err = pmemobj_tx_end(); err != 0) {
        errno = err;
        throw pmdk_error("transaction aborted");
    }
    if constexpr (!std::is_void_v<R>)
        return std::move(*result);
}

/// Snapshots [ptr, ptr + sizeof(T)) in the running transaction before it is changed.
template <class T> void snapshot(T* ptr) {
    if (pmemobj_tx_add_range_direct(ptr, sizeof(T)) != 0)
        throw pmdk_error("pmemobj_tx_add_range_direct");
}

template <class V> struct node {
    std::uint64_t key;
    PMEMoid next;
    V value;
};

struct table_root {
    PMEMoid buckets;
    std::uint64_t bucket_count;
    std::uint64_t size;
};

inline constexpr std::uint64_t node_type_num = 1;
inline constexpr std::uint64_t buckets_type_num = 2;

/// A chained hash table of 64-bit keys and values of type V in a libpmemobj pool. Pointers
/// are PMEMoids (the pool is mapped at a different address in every run). Not thread-safe.
template <class V> class hashtable {
public:
    using node_type = node<V>;

    /// Makes an empty table with `bucket_count` buckets (a power of two, at least 16).
    /// @throw pmdk_error no room for the root or the bucket array
    static hashtable create(PMEMobjpool* pop, std::uint64_t bucket_count) {
        const std::uint64_t n = std::bit_ceil(bucket_count < 16 ? 16 : bucket_count);
        PMEMoid root = pmemobj_root(pop, sizeof(table_root));
        if (OID_IS_NULL(root))
            throw pmdk_error("pmemobj_root");
        auto* r = static_cast<table_root*>(pmemobj_direct(root));
        transaction(pop, [&] {
            snapshot(r);
            r->buckets = pmemobj_tx_zalloc(n * sizeof(PMEMoid), buckets_type_num);
            if (OID_IS_NULL(r->buckets))
                throw pmdk_error("pmemobj_tx_zalloc of the bucket array");
            r->bucket_count = n;
            r->size = 0;
        });
        return hashtable(pop, r);
    }

    /// Attaches to the table that create() made in `pop`.
    /// @throw std::runtime_error the pool's root holds no valid table
    static hashtable open(PMEMobjpool* pop) {
        auto* r = static_cast<table_root*>(pmemobj_direct(pmemobj_root(pop, sizeof(table_root))));
        if (r == nullptr || OID_IS_NULL(r->buckets) || r->bucket_count < 16 ||
            !std::has_single_bit(r->bucket_count))
            throw std::runtime_error("pmdk_ht: the pool holds no hash table");
        return hashtable(pop, r);
    }

    bool insert(std::uint64_t key, const V& value) {
        return transaction(pop_, [&] {
            PMEMoid* head = &buckets_[bucket_of(key)];
            for (node_type* n = ptr(*head); n != nullptr; n = ptr(n->next))
                if (n->key == key)
                    return false;
            PMEMoid oid = pmemobj_tx_alloc(sizeof(node_type), node_type_num);
            if (OID_IS_NULL(oid))
                throw pmdk_error("pmemobj_tx_alloc of a node");
            // New in this transaction: no snapshot needed, libpmemobj flushes it at commit.
            node_type* n = ptr(oid);
            n->key = key;
            n->value = value;
            n->next = *head;
            snapshot(head);
            *head = oid;
            snapshot(&root_->size);
            root_->size += 1;
            return true;
        });
    }

    bool update(std::uint64_t key, const V& value) {
        return transaction(pop_, [&] {
            node_type* n = find(key);
            if (n == nullptr)
                return false;
            snapshot(&n->value);
            n->value = value;
            return true;
        });
    }

    template <class F> std::optional<V> update_with(std::uint64_t key, F&& f) {
        return transaction(pop_, [&]() -> std::optional<V> {
            node_type* n = find(key);
            if (n == nullptr)
                return std::nullopt;
            V v = f(n->value);
            snapshot(&n->value);
            n->value = v;
            return v;
        });
    }

    /// Reads need no transaction in libpmemobj (no isolation to keep).
    std::optional<V> lookup(std::uint64_t key) const {
        node_type* n = find(key);
        if (n == nullptr)
            return std::nullopt;
        return n->value;
    }

    bool erase(std::uint64_t key) {
        return transaction(pop_, [&] {
            PMEMoid* link = &buckets_[bucket_of(key)];
            for (node_type* n = ptr(*link); n != nullptr; link = &n->next, n = ptr(*link)) {
                if (n->key == key) {
                    PMEMoid victim = *link;
                    snapshot(link);
                    *link = n->next;
                    snapshot(&root_->size);
                    root_->size -= 1;
                    if (pmemobj_tx_free(victim) != 0)
                        throw pmdk_error("pmemobj_tx_free");
                    return true;
                }
            }
            return false;
        });
    }

    std::uint64_t size() const { return root_->size; }
    std::uint64_t bucket_count() const noexcept { return mask_ + 1; }

    std::uint64_t count_nodes() const {
        std::uint64_t c = 0;
        for (std::uint64_t b = 0; b <= mask_; ++b)
            for (node_type* n = ptr(buckets_[b]); n != nullptr; n = ptr(n->next))
                ++c;
        return c;
    }

private:
    hashtable(PMEMobjpool* pop, table_root* root)
        : pop_(pop), root_(root), buckets_(static_cast<PMEMoid*>(pmemobj_direct(root->buckets))),
          mask_(root->bucket_count - 1), shift_(64 - std::countr_zero(root->bucket_count)) {}

    static node_type* ptr(PMEMoid oid) noexcept {
        return static_cast<node_type*>(pmemobj_direct(oid));
    }

    std::uint64_t bucket_of(std::uint64_t key) const noexcept {
        return (key * 0x9E3779B97F4A7C15ull) >> shift_;
    }

    node_type* find(std::uint64_t key) const {
        for (node_type* n = ptr(buckets_[bucket_of(key)]); n != nullptr; n = ptr(n->next))
            if (n->key == key)
                return n;
        return nullptr;
    }

    PMEMobjpool* pop_;
    table_root* root_;
    PMEMoid* buckets_;
    std::uint64_t mask_;
    int shift_;
};

} // namespace pmdk_ht
