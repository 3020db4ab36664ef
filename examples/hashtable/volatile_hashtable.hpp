// tlptm-workloads — the walk floor: the chained hash table of hashtable.hpp in plain volatile
// memory, without transactional memory or persistence. The driver runs it as a third backend,
// "volatile", on the same keys with the same per-operation timing, so that what a transaction
// costs can be set against what the table's own walk (its cache misses) costs on the machine.
//
// The same data structure as tlptm_ht::hashtable: a power-of-two array of bucket heads, nodes
// {key, next, value} hashed to their bucket by the same function, new nodes pushed at the head
// of their chain, a count. Its memory is of the pool's kind (a scratch file at the run's pool
// path, mapped as the pool is), and nodes lie as tlptm's allocator lays them out: one after
// the other at the stride of their size class, the pages populated 64 KiB (a superblock) at a
// time as they come into use. So fresh memory costs both tables alike. It is not small: on a
// shared 2-vCPU guest (AMD EPYC, 2026-12-05) workload a's mean here was about 300 ns per
// insert, and 50-70 ns in a trial that wrote to every page of the arena before the run (the
// first store to a fresh page costs tens of microseconds there, even after populating);
// tlptm's new nodes pay that too.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <tlptm/tlptm.hpp>

#include "backends.hpp"
#include "hashtable.hpp"
#include "scratch.hpp"
#include "value.hpp"

namespace workloads {

/// The hash table in volatile memory: no transactions, no log, no flush, no fence. Single
/// thread; no emulated write latency (nothing is written back); no counters.
template <std::size_t N> class volatile_backend {
public:
    using value_type = value_t<N>;
    static constexpr const char* name = "volatile";
    static constexpr bool has_stats = false;
    static constexpr bool supports_threads = false;
    static constexpr bool supports_write_latency = false;

    /// Maps the bucket array and room for c.max_nodes nodes in a scratch file at c.path.
    /// @throw std::runtime_error the file cannot be made or mapped
    explicit volatile_backend(const backend_config& c)
        : bucket_count_(tlptm_ht::rounded_bucket_count(c.bucket_count)),
          shift_(tlptm_ht::bucket_shift(bucket_count_)),
          stride_(tlptm::detail::size_classes[tlptm::detail::class_of(
              sizeof(tlptm_ht::node<value_type>))]),
          nodes_at_(round_up(bucket_count_ * sizeof(node*), superblock)),
          bytes_(nodes_at_ +
                 round_up(std::max<std::uint64_t>(c.max_nodes, 1) * stride_, superblock)),
          base_(static_cast<std::byte*>(map_scratch(c.path, bytes_))) {
        if (base_ == nullptr)
            throw std::runtime_error("volatile table: cannot map " + std::to_string(bytes_) +
                                     " bytes of scratch file at '" + c.path +
                                     "': " + std::strerror(errno));
        buckets_ = reinterpret_cast<node**>(base_);
        // Written once, as tlptm zeroes its bucket array when it makes the table.
        std::memset(buckets_, 0, bucket_count_ * sizeof(node*));
        next_ = populated_ = nodes_at_;
    }

    ~volatile_backend() { ::munmap(base_, bytes_); }

    volatile_backend(const volatile_backend&) = delete;
    volatile_backend& operator=(const volatile_backend&) = delete;

    bool insert(std::uint64_t key, const value_type& v) {
        node*& head = buckets_[tlptm_ht::bucket_index(key, shift_)];
        for (node* n = head; n != nullptr; n = n->next)
            if (n->key == key)
                return false;
        head = ::new (allocate()) node{key, head, v};
        ++count_;
        return true;
    }

    bool update(std::uint64_t key, const value_type& v) {
        node* n = find(key);
        if (n == nullptr)
            return false;
        n->value = v;
        return true;
    }

    template <class F> std::optional<value_type> update_with(std::uint64_t key, F&& f) {
        node* n = find(key);
        if (n == nullptr)
            return std::nullopt;
        n->value = f(n->value);
        return n->value;
    }

    std::optional<value_type> lookup(std::uint64_t key) const {
        node* n = find(key);
        if (n == nullptr)
            return std::nullopt;
        return n->value;
    }

    /// Unlinks the node of `key` and puts it on the free list.
    bool erase(std::uint64_t key) {
        for (node** link = &buckets_[tlptm_ht::bucket_index(key, shift_)]; *link != nullptr;
             link = &(*link)->next) {
            node* n = *link;
            if (n->key == key) {
                *link = n->next;
                n->next = free_;
                free_ = n;
                --count_;
                return true;
            }
        }
        return false;
    }

    std::uint64_t size() const { return count_; }

    std::uint64_t count_nodes() const {
        std::uint64_t c = 0;
        for (std::uint64_t b = 0; b < bucket_count_; ++b)
            for (const node* n = buckets_[b]; n != nullptr; n = n->next)
                ++c;
        return c;
    }

    template <class F> void batch(F&& f) { std::forward<F>(f)(); }

    /// Nothing to do: there is nothing durable to reopen. The driver's verification still
    /// checks everything else (size, chains, every key's latest value, erases) before and
    /// after this call.
    void reopen() {}

    tlptm::stats stats() const { return {}; }
    void prepare_thread() {}

private:
    /// tlptm_ht::node<V> with plain fields (tlptm::p stores need a transaction).
    struct node {
        std::uint64_t key;
        node* next;
        value_type value;
    };
    static_assert(sizeof(node) == sizeof(tlptm_ht::node<value_type>));

    /// tlptm's allocator populates a superblock when it takes a fresh one.
    static constexpr std::size_t superblock = tlptm::detail::superblock_bytes;

    static constexpr std::uint64_t round_up(std::uint64_t n, std::uint64_t to) {
        return (n + to - 1) / to * to;
    }

    /// A node's memory: the last one erased, else the next stride of the arena.
    /// @throw std::runtime_error the arena is full
    void* allocate() {
        if (node* n = free_) {
            free_ = n->next;
            return n;
        }
        if (next_ + stride_ > bytes_)
            throw std::runtime_error("volatile table: the arena is full (room for " +
                                     std::to_string((bytes_ - nodes_at_) / stride_) + " nodes)");
        if (next_ + stride_ > populated_) { // as tlptm's allocator populates a new superblock
            const std::uint64_t end = std::min(round_up(next_ + stride_, superblock), bytes_);
            populate_for_writing(base_ + populated_, end - populated_);
            populated_ = end;
        }
        void* p = base_ + next_;
        next_ += stride_;
        return p;
    }

    node* find(std::uint64_t key) const {
        for (node* n = buckets_[tlptm_ht::bucket_index(key, shift_)]; n != nullptr; n = n->next)
            if (n->key == key)
                return n;
        return nullptr;
    }

    std::uint64_t bucket_count_;
    int shift_;
    std::uint64_t stride_;   ///< tlptm's block size for the node: the size class tlptm::make uses
    std::uint64_t nodes_at_; ///< offset of the node arena (after the buckets, 64 KiB aligned)
    std::uint64_t bytes_;    ///< size of the mapping
    std::byte* base_;
    node** buckets_ = nullptr;
    std::uint64_t next_ = 0;      ///< offset of the next node never used
    std::uint64_t populated_ = 0; ///< offsets below this are populated
    node* free_ = nullptr;        ///< erased nodes, linked through next
    std::uint64_t count_ = 0;
};

} // namespace workloads
