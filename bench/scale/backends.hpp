// The backends of the scaling driver besides the example's tlptm hash table
// (workloads::tlptm_backend, examples/hashtable/backends.hpp, thread-safe as it is):
//
//   pmdk_striped_table  the example's PMDK hash table (pmdk_ht::hashtable) made safe for
//                       threads: libpmemobj transactions do not isolate threads, so every
//                       operation takes the lock of its bucket stripe around
//                       pmemobj_tx_begin ... end
//   tlptm_bank          accounts in a tlptm pool; a transfer is one tlptm::atomic
//   pmdk_bank           accounts in a libpmemobj pool; a transfer locks its two accounts (in
//                       index order) around one libpmemobj transaction
//
// Each owns one pool file for one run and removes it when destroyed. Every backend has
// `name`, stats() (tlptm's counters; zero for PMDK) and prepare_thread() (a worker's one-time
// set-up before the clock starts: tlptm::pool::prepare_thread; nothing for PMDK).
#pragma once

#include <libpmemobj.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

#include <tlptm/tlptm.hpp>

#include "../../examples/hashtable/backends.hpp"
#include "../../examples/hashtable/pmdk_hashtable.hpp"

namespace tlptm_scale {

using key_type = std::uint64_t;
using value_type = std::uint64_t; ///< a small per-key counter, 1 after insertion

/// tlptm's hash table, as the workloads example runs it (log mode, emulate_pmem).
using tlptm_table = workloads::tlptm_backend<8>;

/// The example's libpmemobj hash table with a lock per stripe of buckets. Lookups take their
/// stripe's lock shared, updates exclusive. An insert also changes the table's one element
/// count (pmdk_ht::table_root::size), so it takes the count's lock as well (always after its
/// stripe's: no cycle); inserts are therefore serialised, as they would be in any user of
/// that table. Thread-safe.
class pmdk_striped_table {
public:
    static constexpr const char* name = "pmdk";
    using table_type = pmdk_ht::hashtable<value_type>;
    /// Stripes of buckets, each guarded by one lock. The stripe of a key is the top bits of the
    /// same Fibonacci hash that picks its bucket, so every key of a bucket has one stripe.
    static constexpr int stripe_bits = 10;
    static constexpr std::size_t stripes = std::size_t{1} << stripe_bits;

    /// Creates the pool (PMEM_IS_PMEM_FORCE=1 must be set before, see main) and an empty table
    /// of at least `stripes` buckets.
    /// @throw pmdk_ht::pmdk_error the pool or the table cannot be made
    explicit pmdk_striped_table(const workloads::backend_config& c)
        : file_(c.path), pop_(make_pool(c)), table_(make_table(pop_, c)),
          locks_(std::make_unique<stripe_lock[]>(stripes)) {}

    ~pmdk_striped_table() { pmemobj_close(pop_); }
    pmdk_striped_table(const pmdk_striped_table&) = delete;
    pmdk_striped_table& operator=(const pmdk_striped_table&) = delete;

    bool insert(key_type key, const value_type& v) {
        std::unique_lock stripe(lock_of(key));
        std::unique_lock count(count_lock_.m);
        return table_.insert(key, v);
    }
    template <class F> std::optional<value_type> update_with(key_type key, F&& f) {
        std::unique_lock stripe(lock_of(key));
        return table_.update_with(key, std::forward<F>(f));
    }
    std::optional<value_type> lookup(key_type key) const {
        std::shared_lock stripe(lock_of(key));
        return table_.lookup(key);
    }
    /// Single-threaded only (after a run).
    std::uint64_t size() const { return table_.size(); }
    std::uint64_t count_nodes() const { return table_.count_nodes(); }
    /// Runs f (several operations) as one libpmemobj transaction.
    template <class F> void batch(F&& f) { pmdk_ht::transaction(pop_, std::forward<F>(f)); }
    tlptm::stats stats() const { return {}; }
    void prepare_thread() {} // the undo-log lanes were written when the pool was created

private:
    struct alignas(64) stripe_lock {
        mutable std::shared_mutex m;
    };

    std::shared_mutex& lock_of(key_type key) const noexcept {
        return locks_[(key * 0x9E3779B97F4A7C15ull) >> (64 - stripe_bits)].m;
    }

    static PMEMobjpool* make_pool(const workloads::backend_config& c) {
        const std::uint64_t buckets = bucket_count_for(c);
        // libpmemobj adds a 16-byte header to each object and rounds to its allocation
        // classes; leave twice the room (as the example's pmdk_backend does).
        const std::uint64_t node_bytes =
            (sizeof(typename table_type::node_type) + 16 + 63) / 64 * 64;
        const std::uint64_t size =
            (std::uint64_t{64} << 20) + 2 * (c.max_nodes * node_bytes + buckets * sizeof(PMEMoid));
        PMEMobjpool* pop = pmemobj_create(c.path.c_str(), layout, size, 0600);
        if (pop == nullptr)
            throw pmdk_ht::pmdk_error("pmemobj_create('" + c.path + "')");
        return pop;
    }

    static table_type make_table(PMEMobjpool* pop, const workloads::backend_config& c) {
        try {
            return table_type::create(pop, bucket_count_for(c));
        } catch (...) {
            pmemobj_close(pop);
            throw;
        }
    }

    /// At least one bucket per stripe, so that a stripe is a whole number of buckets.
    static std::uint64_t bucket_count_for(const workloads::backend_config& c) {
        return std::bit_ceil(c.bucket_count < stripes ? std::uint64_t{stripes} : c.bucket_count);
    }

    static constexpr const char* layout = "tlptm-scale-table";

    workloads::file_remover file_;
    PMEMobjpool* pop_;
    table_type table_;
    std::unique_ptr<stripe_lock[]> locks_;
    stripe_lock count_lock_;
};

/// What a bank backend needs to make the pool of one run.
struct bank_config {
    std::string path;           ///< pool file (must not exist)
    std::uint64_t accounts = 0; ///< number of accounts
    std::int64_t initial = 0;   ///< balance of every account at creation
    unsigned threads = 1;       ///< threads that run transfers at once
    tlptm::durability durability = tlptm::durability::emulate_pmem; ///< how tlptm persists
};

/// The sum of all balances and the smallest one (a consistency check after a run).
struct bank_totals {
    std::int64_t sum = 0;
    std::int64_t min = 0;
};

/// Accounts of one cache line each (no false sharing between the disjoint ranges of threads)
/// in a tlptm pool, persistent memory emulated. Thread-safe (tlptm's STM isolates transfers).
class tlptm_bank {
public:
    static constexpr const char* name = "tlptm";

    /// @throw tlptm::error (and subclasses) the pool cannot be made
    explicit tlptm_bank(const bank_config& c)
        : file_(c.path), pool_(tlptm::pool::create(c.path, options_for(c))), count_(c.accounts) {
        root* r = pool_.root<root>();
        // The array is allocated with room to start it on a cache line (blocks are 16-byte
        // aligned), then filled by transactions of `chunk` accounts, so that no log entry
        // outgrows its ring.
        accounts_ = tlptm::atomic(pool_, [&](tlptm::tx& tx) {
            auto raw = reinterpret_cast<std::uintptr_t>(tx.alloc(count_ * sizeof(account) + 48));
            auto* a = reinterpret_cast<account*>((raw + 63) & ~std::uintptr_t{63});
            r->accounts = a;
            r->count = count_;
            return a;
        });
        static constexpr std::uint64_t chunk = 512;
        for (std::uint64_t first = 0; first < count_; first += chunk)
            tlptm::atomic(pool_, [&] {
                for (std::uint64_t i = first; i < count_ && i < first + chunk; ++i)
                    accounts_[i].balance = c.initial;
            });
    }

    ~tlptm_bank() {
        try {
            pool_.close();
        } catch (...) {
            // The file is removed next anyway.
        }
    }
    tlptm_bank(const tlptm_bank&) = delete;
    tlptm_bank& operator=(const tlptm_bank&) = delete;

    /// Moves `amount` from account `from` to account `to` (distinct) in one transaction; false
    /// (nothing changed) if `from` holds less than `amount`.
    bool transfer(std::uint64_t from, std::uint64_t to, std::int64_t amount) {
        return tlptm::atomic(pool_, [&] {
            const std::int64_t have = accounts_[from].balance;
            if (have < amount)
                return false;
            accounts_[from].balance = have - amount;
            accounts_[to].balance += amount;
            return true;
        });
    }

    /// Sum and minimum of the balances (read-only transactions of 4096 accounts each; call
    /// when no transfer runs).
    bank_totals totals() {
        bank_totals t{0, std::numeric_limits<std::int64_t>::max()};
        for (std::uint64_t first = 0; first < count_; first += 4096) {
            bank_totals part = tlptm::atomic(pool_, [&] {
                bank_totals p{0, std::numeric_limits<std::int64_t>::max()};
                for (std::uint64_t i = first; i < count_ && i < first + 4096; ++i) {
                    const std::int64_t b = accounts_[i].balance;
                    p.sum += b;
                    p.min = std::min(p.min, b);
                }
                return p;
            });
            t.sum += part.sum;
            t.min = std::min(t.min, part.min);
        }
        return t;
    }

    tlptm::stats stats() const { return pool_.stats(); }
    void prepare_thread() { pool_.prepare_thread(); }

private:
    struct alignas(64) account {
        tlptm::p<std::int64_t> balance;
    };
    struct root {
        tlptm::p<account*> accounts;
        tlptm::p<std::uint64_t> count;
    };

    static tlptm::pool_options options_for(const bank_config& c) {
        tlptm::pool_options o;
        o.mode = tlptm::log_mode::tlptm;
        o.durability = c.durability;
        o.emulate_write_ns = 0;
        workloads::apply_env_options(o); // TLPTM_SOLO_AFTER and the rest, as for the tables
        o.max_threads = c.threads + 2;   // the workers, and the thread that fills and checks
        o.size = (std::size_t{64} << 20) + std::size_t{o.max_threads} * (std::size_t{2} << 20) +
                 2 * c.accounts * sizeof(account);
        return o;
    }

    workloads::file_remover file_; // first: removed last
    tlptm::pool pool_;
    std::uint64_t count_;
    account* accounts_ = nullptr;
};

/// Accounts of one cache line each in a libpmemobj pool, with a lock per account in volatile
/// memory: a transfer takes the locks of both accounts (lower index first: no deadlock) around
/// one libpmemobj transaction. Thread-safe.
class pmdk_bank {
public:
    static constexpr const char* name = "pmdk";

    /// @throw pmdk_ht::pmdk_error the pool cannot be made
    explicit pmdk_bank(const bank_config& c)
        : file_(c.path), pop_(make_pool(c)), count_(c.accounts),
          locks_(std::make_unique<account_lock[]>(c.accounts)) {
        try {
            auto* r = static_cast<root*>(pmemobj_direct(pmemobj_root(pop_, sizeof(root))));
            if (r == nullptr)
                throw pmdk_ht::pmdk_error("pmemobj_root");
            pmdk_ht::transaction(pop_, [&] {
                pmdk_ht::snapshot(r);
                r->accounts = pmemobj_tx_zalloc(count_ * sizeof(account) + 64, account_type_num);
                if (OID_IS_NULL(r->accounts))
                    throw pmdk_ht::pmdk_error("pmemobj_tx_zalloc of the accounts");
                r->count = count_;
                auto raw = reinterpret_cast<std::uintptr_t>(pmemobj_direct(r->accounts));
                accounts_ = reinterpret_cast<account*>((raw + 63) & ~std::uintptr_t{63});
                // Allocated by this transaction: written without a snapshot.
                for (std::uint64_t i = 0; i < count_; ++i)
                    accounts_[i].balance = c.initial;
            });
        } catch (...) {
            pmemobj_close(pop_);
            throw;
        }
    }

    ~pmdk_bank() { pmemobj_close(pop_); }
    pmdk_bank(const pmdk_bank&) = delete;
    pmdk_bank& operator=(const pmdk_bank&) = delete;

    bool transfer(std::uint64_t from, std::uint64_t to, std::int64_t amount) {
        std::unique_lock first(locks_[std::min(from, to)].m);
        std::unique_lock second(locks_[std::max(from, to)].m);
        return pmdk_ht::transaction(pop_, [&] {
            account& a = accounts_[from];
            account& b = accounts_[to];
            if (a.balance < amount)
                return false;
            pmdk_ht::snapshot(&a.balance);
            pmdk_ht::snapshot(&b.balance);
            a.balance -= amount;
            b.balance += amount;
            return true;
        });
    }

    /// Sum and minimum of the balances (call when no transfer runs).
    bank_totals totals() const {
        bank_totals t{0, std::numeric_limits<std::int64_t>::max()};
        for (std::uint64_t i = 0; i < count_; ++i) {
            t.sum += accounts_[i].balance;
            t.min = std::min(t.min, accounts_[i].balance);
        }
        return t;
    }

    tlptm::stats stats() const { return {}; }
    void prepare_thread() {} // the undo-log lanes were written when the pool was created

private:
    struct alignas(64) account {
        std::int64_t balance;
    };
    struct root {
        PMEMoid accounts;
        std::uint64_t count;
    };
    struct alignas(64) account_lock {
        std::mutex m;
    };
    static constexpr std::uint64_t account_type_num = 3;
    static constexpr const char* layout = "tlptm-scale-bank";

    static PMEMobjpool* make_pool(const bank_config& c) {
        const std::uint64_t size = (std::uint64_t{64} << 20) + 2 * c.accounts * sizeof(account);
        PMEMobjpool* pop = pmemobj_create(c.path.c_str(), layout, size, 0600);
        if (pop == nullptr)
            throw pmdk_ht::pmdk_error("pmemobj_create('" + c.path + "')");
        return pop;
    }

    workloads::file_remover file_;
    PMEMobjpool* pop_;
    std::uint64_t count_;
    std::unique_ptr<account_lock[]> locks_;
    account* accounts_ = nullptr;
};

} // namespace tlptm_scale
