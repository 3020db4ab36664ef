// The transactional-memory backends the workload driver runs on: tlptm (every log mode) and,
// when libpmemobj was found at build time, PMDK's libpmemobj transactions. A third backend with
// the same interface, the table without TM or persistence, is in volatile_hashtable.hpp.
//
// A backend owns one pool file for one run: its constructor creates the pool and an empty
// table, its destructor closes the pool and removes the file. Each operation is one
// transaction. A backend type provides:
//
//   value_type                         the value stored per key
//   name, has_stats, supports_threads, supports_write_latency
//   backend(const backend_config&)     create the pool and the table
//   insert(key, v) -> bool             false if the key was present
//   update(key, v) -> bool             false if the key was absent
//   update_with(key, f) -> optional<v> v := f(v); the new value, or nothing if absent
//   lookup(key) -> optional<v>
//   erase(key) -> bool
//   size(), count_nodes()
//   batch(f)                           run f (several operations) as one transaction
//   reopen()                           close the pool and open it again (the table must be
//                                      found as it was: what was committed is durable)
//   stats() -> tlptm::stats            counters since the pool was opened (if has_stats)
//   prepare_thread()                   called by each worker before the clock starts: the
//                                      thread's one-time set-up (tlptm: pool::prepare_thread)
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <tlptm/tlptm.hpp>

#include "hashtable.hpp"
#include "value.hpp"

#if TLPTM_WORKLOADS_HAVE_PMDK
#include "pmdk_hashtable.hpp"
#endif

namespace workloads {

/// The write-back policy whose name (tlptm::to_string) is `name`; empty for any other string.
inline std::optional<tlptm::write_back> parse_write_back(std::string_view name) {
    for (auto w : {tlptm::write_back::automatic, tlptm::write_back::eager, tlptm::write_back::lazy,
                   tlptm::write_back::prompt, tlptm::write_back::adaptive})
        if (name == tlptm::to_string(w))
            return w;
    return std::nullopt;
}

/// What a backend needs to know to make the pool of one run.
struct backend_config {
    std::string path;                              ///< pool file (must not exist)
    tlptm::log_mode mode = tlptm::log_mode::tlptm; ///< tlptm only
    std::uint32_t write_ns = 0;                    ///< emulated write latency (tlptm only)
    std::uint64_t bucket_count = 1024;
    std::uint64_t max_nodes = 0; ///< keys the table will hold at most
    unsigned threads = 1;        ///< threads that run transactions at once
    /// tlptm only: how stores are made durable (emulated persistent memory, or msync)
    tlptm::durability durability = tlptm::durability::emulate_pmem;
};

/// Removes a file when destroyed (declared first in a backend: it goes last).
class file_remover {
public:
    explicit file_remover(std::string path) : path_(std::move(path)) {}
    file_remover(const file_remover&) = delete;
    file_remover& operator=(const file_remover&) = delete;
    ~file_remover() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    const std::string& path() const noexcept { return path_; }

private:
    std::string path_;
};

/// The write-back policy a pool chose, and why (`asked`: what its options said).
inline std::string describe_write_back(tlptm::write_back chosen, tlptm::write_back asked,
                                       const tlptm::log_write_choice& c) {
    std::string s = tlptm::to_string(chosen);
    if (asked != tlptm::write_back::automatic)
        return s + ", as given";
    char buf[160];
    const bool lines = c.method == tlptm::log_write::non_temporal_lines;
    const double nt_ns = c.non_temporal_chosen_small_ns();
    if (c.measured && nt_ns > 0)
        std::snprintf(buf, sizeof buf,
                      ", automatic: small entries with stores + CLWB took %.2f x non-temporal%s "
                      "(adaptive from %.1f x)",
                      c.store_and_flush_small_ns / nt_ns, lines ? " whole lines" : "",
                      tlptm::detail::adaptive_flush_ratio);
    else
        std::snprintf(buf, sizeof buf, ", automatic: nothing measured");
    return s + buf;
}

/// "non-temporal stores", or each size's method when they differ, and the measurement
/// behind them if the library measured.
inline std::string describe_log_write(const tlptm::log_write_choice& c) {
    auto how = [](tlptm::log_write w) {
        return w == tlptm::log_write::store_and_flush      ? "ordinary stores + CLWB"
               : w == tlptm::log_write::non_temporal_lines ? "non-temporal stores of whole lines"
                                                           : "non-temporal stores";
    };
    std::string s = how(c.method);
    if (c.large_method != c.method)
        s += std::string(" below ") + std::to_string(c.large_entry_bytes) + " B, " +
             how(c.large_method) + " from " + std::to_string(c.large_entry_bytes) + " B";
    const std::string blocks =
        std::string("; an insert's new blocks: ") +
        (c.new_blocks == tlptm::log_write::store_and_flush ? "flushed (CLWB)"
                                                           : "rewritten with non-temporal stores");
    if (!c.measured)
        return s + blocks + ", as given";
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  ", measured when the pool opened (per entry + SFENCE in a steady stream, "
                  "12-36 B / 72-520 B at packed ring positions): non-temporal %.0f / %.0f ns, "
                  "whole lines %.0f / %.0f ns, stores + CLWB %.0f / %.0f ns",
                  c.non_temporal_small_ns, c.non_temporal_large_ns, c.non_temporal_lines_small_ns,
                  c.non_temporal_lines_large_ns, c.store_and_flush_small_ns,
                  c.store_and_flush_large_ns);
    s += buf;
    if (c.new_block_non_temporal_ns == 0)
        return s + blocks + ", as the small entries (not measured: rings too small)";
    const bool flush_measured_faster =
        c.new_block_store_and_flush_ns < c.flush_margin * c.new_block_non_temporal_ns;
    if (flush_measured_faster != (c.new_blocks == tlptm::log_write::store_and_flush))
        return s + blocks + ", as given (pool_options::new_block_write)";
    std::snprintf(buf, sizeof buf,
                  ", measured (per packed %zu B block stored, with a small entry + SFENCE): "
                  "rewritten %.0f ns, flushed %.0f ns",
                  c.measured_block_bytes, c.new_block_non_temporal_ns,
                  c.new_block_store_and_flush_ns);
    return s + blocks + buf;
}

/// The log write method environment variable `name` asks for: nt, lines or flush; nothing
/// when it is unset, empty or auto (the library's choice).
/// @throw std::invalid_argument any other value
inline std::optional<tlptm::log_write> env_log_write(const char* name) {
    const char* value = std::getenv(name);
    const std::string v = value ? value : "";
    if (v == "flush")
        return tlptm::log_write::store_and_flush;
    if (v == "nt")
        return tlptm::log_write::non_temporal;
    if (v == "lines")
        return tlptm::log_write::non_temporal_lines;
    if (v != "auto" && !v.empty())
        throw std::invalid_argument(std::string(name) + " must be nt, lines, flush or auto, not '" +
                                    v + "'");
    return std::nullopt;
}

/// The pool options the environment sets, to compare the library's choices in the workload
/// programs (tlptm-workloads, tlptm-scale): TLPTM_WRITE_BACK, TLPTM_LOG_WRITE,
/// TLPTM_NEW_BLOCK_WRITE, TLPTM_SOLO_AFTER, TLPTM_POPULATE_AHEAD (docs/workloads.md). Unset or
/// empty: the library's default.
/// @throw std::invalid_argument a value the variable does not take
inline void apply_env_options(tlptm::pool_options& o) {
    // TLPTM_WRITE_BACK=eager|lazy|prompt|adaptive|automatic compares the write-back
    // policies (default: the library's, automatic).
    if (const char* wb = std::getenv("TLPTM_WRITE_BACK"); wb && *wb) {
        const auto w = parse_write_back(wb);
        if (!w)
            throw std::invalid_argument("TLPTM_WRITE_BACK must be eager, lazy, prompt, "
                                        "adaptive or automatic, not '" +
                                        std::string(wb) + "'");
        o.write_back = *w;
    }
    // TLPTM_LOG_WRITE=nt|flush|auto compares the ways of writing log entries (default: the
    // library's, auto: measured when the pool opens); TLPTM_NEW_BLOCK_WRITE likewise the ways
    // of making an insert's new blocks durable (auto: measured with the entries).
    if (const auto w = env_log_write("TLPTM_LOG_WRITE"))
        o.log_write = *w;
    if (const auto w = env_log_write("TLPTM_NEW_BLOCK_WRITE"))
        o.new_block_write = *w;
    // TLPTM_SOLO_AFTER=N sets pool_options::solo_after (0: a thread alone never takes the
    // pool solo; default: the library's).
    if (const char* sa = std::getenv("TLPTM_SOLO_AFTER"); sa && *sa) {
        char* end = nullptr;
        const unsigned long long n = std::strtoull(sa, &end, 10);
        if (*end != '\0' || n > 0xFFFFFFFFull)
            throw std::invalid_argument("TLPTM_SOLO_AFTER must be a count of transactions, "
                                        "not '" +
                                        std::string(sa) + "'");
        o.solo_after = static_cast<std::uint32_t>(n);
    }
    // TLPTM_POPULATE_AHEAD=0 runs without the pool's page-ahead thread (default: on).
    if (const char* pa = std::getenv("TLPTM_POPULATE_AHEAD"); pa && *pa) {
        const std::string v(pa);
        if (v != "0" && v != "1")
            throw std::invalid_argument("TLPTM_POPULATE_AHEAD must be 0 or 1, not '" + v + "'");
        o.populate_ahead = v == "1";
    }
}

/// tlptm in one of its log modes, persistent memory emulated (durability::emulate_pmem: CPU
/// flushes and fences only, plus the emulated write latency per line).
template <std::size_t N> class tlptm_backend {
public:
    using value_type = value_t<N>;
    using table_type = tlptm_ht::hashtable<value_type>;
    static constexpr const char* name = "tlptm";
    static constexpr bool has_stats = true;
    static constexpr bool supports_threads = true;
    static constexpr bool supports_write_latency = true;

    explicit tlptm_backend(const backend_config& c)
        : file_(c.path), options_(options_for(c)), pool_(tlptm::pool::create(c.path, options_)),
          table_(table_type::create(pool_, c.bucket_count)) {
        last_log_write = pool_.chosen_log_write();
        last_write_back = {pool_.chosen_write_back(), options_.write_back};
    }

    /// How the last pool wrote its log entries (the same for every run of a process: the
    /// library measures once per device). Empty until a pool was made.
    static inline std::optional<tlptm::log_write_choice> last_log_write;
    /// The write-back policy of the last pool (automatic resolved: the same for every run of a
    /// process unless TLPTM_WRITE_BACK names one).
    struct write_back_choice {
        tlptm::write_back chosen, asked;
    };
    static inline std::optional<write_back_choice> last_write_back;

    tlptm_backend(const tlptm_backend&) = delete; // the table points at pool_
    tlptm_backend& operator=(const tlptm_backend&) = delete;

    ~tlptm_backend() {
        try {
            pool_.close();
        } catch (...) {
            // The file is removed next anyway.
        }
    }

    bool insert(std::uint64_t key, const value_type& v) { return table_.insert(key, v); }
    bool update(std::uint64_t key, const value_type& v) { return table_.update(key, v); }
    template <class F> std::optional<value_type> update_with(std::uint64_t key, F&& f) {
        return table_.update_with(key, std::forward<F>(f));
    }
    std::optional<value_type> lookup(std::uint64_t key) const { return table_.lookup(key); }
    bool erase(std::uint64_t key) { return table_.erase(key); }
    std::uint64_t size() const { return table_.size(); }
    std::uint64_t count_nodes() const { return table_.count_nodes(); }
    template <class F> void batch(F&& f) { tlptm::atomic(pool_, std::forward<F>(f)); }
    tlptm::stats stats() const { return pool_.stats(); }
    void prepare_thread() { pool_.prepare_thread(); }

    /// Closes the pool (checkpoint, unmap) and opens it again, running recovery; the counters
    /// start again from zero.
    void reopen() {
        pool_.close();
        pool_ = tlptm::pool::open(file_.path(), options_);
        table_ = table_type::open(pool_);
    }

private:
    static tlptm::pool_options options_for(const backend_config& c) {
        tlptm::pool_options o;
        o.mode = c.mode;
        o.durability = c.durability;
        o.emulate_write_ns = c.write_ns;
        apply_env_options(o);
        o.max_threads = c.threads + 2; // the workers, and the thread that preloads and checks
        const std::uint64_t buckets = std::bit_ceil(c.bucket_count < 16 ? 16 : c.bucket_count);
        // Room for the nodes in their size class, the bucket array, every log ring, and a
        // superblock per size class per thread; twice over.
        const std::uint64_t node_bytes = std::bit_ceil(sizeof(typename table_type::node_type));
        const std::uint64_t data = c.max_nodes * node_bytes + buckets * 8;
        o.size = (std::size_t{64} << 20) + std::size_t{o.max_threads} * (std::size_t{2} << 20) +
                 2 * data;
        return o;
    }

    file_remover file_;
    tlptm::pool_options options_;
    tlptm::pool pool_;
    table_type table_;
};

#if TLPTM_WORKLOADS_HAVE_PMDK

/// PMDK's libpmemobj transactions (undo log), persistent memory emulated with
/// PMEM_IS_PMEM_FORCE=1 (set by main before the first libpmemobj call). Single thread; no
/// emulated write latency (it cannot be injected into libpmemobj); no counters.
template <std::size_t N> class pmdk_backend {
public:
    using value_type = value_t<N>;
    using table_type = pmdk_ht::hashtable<value_type>;
    static constexpr const char* name = "pmdk";
    static constexpr bool has_stats = false;
    static constexpr bool supports_threads = false;
    static constexpr bool supports_write_latency = false;

    explicit pmdk_backend(const backend_config& c)
        : file_(c.path), pop_(make_pool(c)), table_(make_table(pop_, c)) {}

    ~pmdk_backend() {
        if (pop_ != nullptr)
            pmemobj_close(pop_);
    }

    pmdk_backend(const pmdk_backend&) = delete;
    pmdk_backend& operator=(const pmdk_backend&) = delete;

    bool insert(std::uint64_t key, const value_type& v) { return table_.insert(key, v); }
    bool update(std::uint64_t key, const value_type& v) { return table_.update(key, v); }
    template <class F> std::optional<value_type> update_with(std::uint64_t key, F&& f) {
        return table_.update_with(key, std::forward<F>(f));
    }
    std::optional<value_type> lookup(std::uint64_t key) const { return table_.lookup(key); }
    bool erase(std::uint64_t key) { return table_.erase(key); }
    std::uint64_t size() const { return table_.size(); }
    std::uint64_t count_nodes() const { return table_.count_nodes(); }
    template <class F> void batch(F&& f) { pmdk_ht::transaction(pop_, std::forward<F>(f)); }
    tlptm::stats stats() const { return {}; }
    void prepare_thread() {} // the undo-log lanes were written when the pool was created

    /// Closes the pool and opens it again (libpmemobj maps it at a new address: the table
    /// links are PMEMoids).
    void reopen() {
        pmemobj_close(pop_);
        pop_ = pmemobj_open(file_.path().c_str(), layout);
        if (pop_ == nullptr)
            throw pmdk_ht::pmdk_error("pmemobj_open('" + file_.path() + "')");
        table_ = table_type::open(pop_);
    }

private:
    static constexpr const char* layout = "tlptm-workloads";

    static PMEMobjpool* make_pool(const backend_config& c) {
        const std::uint64_t buckets = std::bit_ceil(c.bucket_count < 16 ? 16 : c.bucket_count);
        // libpmemobj adds a 16-byte header to each object and rounds to its allocation
        // classes; leave twice the room.
        const std::uint64_t node_bytes =
            (sizeof(typename table_type::node_type) + 16 + 63) / 64 * 64;
        const std::uint64_t size =
            (std::uint64_t{64} << 20) + 2 * (c.max_nodes * node_bytes + buckets * sizeof(PMEMoid));
        PMEMobjpool* pop = pmemobj_create(c.path.c_str(), layout, size, 0600);
        if (pop == nullptr)
            throw pmdk_ht::pmdk_error("pmemobj_create('" + c.path + "')");
        return pop;
    }

    static table_type make_table(PMEMobjpool* pop, const backend_config& c) {
        try {
            return table_type::create(pop, c.bucket_count);
        } catch (...) {
            pmemobj_close(pop);
            throw;
        }
    }

    file_remover file_;
    PMEMobjpool* pop_;
    table_type table_;
};

#endif // TLPTM_WORKLOADS_HAVE_PMDK

} // namespace workloads
