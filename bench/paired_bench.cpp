// paired_bench: two values of one pool option, compared in one process by alternating short
// slices of the same hash-table workload, with the median of the paired differences, a sign
// test and a distribution-free interval. See docs/workloads.md, "Paired comparisons".
//
//   paired_bench --compare OPTION=A,B [--workload a|b|c] [--value-size 8|64|256] [--keys N]
//                [--pairs P] [--slice S] [--seed N] [--pool-dir DIR] [--csv FILE]
//
// Why: separate runs of tlptm-workloads on the shared 2-vCPU guests vary by +-30 %, so an effect
// of 30-100 ns per transaction cannot be seen between two invocations. Here both configurations
// live in one process, each with its own pool and table, and run slices of a few milliseconds
// in turn (A B, B A, A B, ...): the machine's drift (a neighbour's load, the host's clock) falls
// on both halves of a pair alike and cancels in their difference.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "backends.hpp"
#include "cli.hpp"
#include "hashtable.hpp"
#include "pool_cleanup.hpp"
#include "value.hpp"

namespace {

using workloads::mix64;
using workloads::value_kind;
using workloads::value_t;
using workloads::cli::parse_u64;
using workloads::cli::split;
using workloads::cli::usage_error;

enum class workload { a, b, c };

/// A bad command line (exit status 2).
/// The pools could not be made (exit status 2, like a usage error: nothing was measured).
class setup_error : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// The pool options that can be compared: all of them apply to one opening, so the two pools
/// differ in nothing else. `mutation` is not an option but one of the library's attribution
/// switches (tlptm::detail::mutation), set around each slice of its side; only in
/// paired_bench_hooks, which is built with the library's test hooks (TLPTM_SCHED_HOOKS).
enum class knob {
    log_write,
    new_block_write,
    write_back,
    mode,
    write_back_lines,
    emulate_write_ns,
    populate_ahead,
    solo_after,
    mutation
};

#if defined(TLPTM_SCHED_HOOKS)
constexpr bool have_hooks = true;
#else
constexpr bool have_hooks = false;
#endif

/// The switches --compare mutation accepts; each removes one persistence step, or all of them
/// (no_persistence: what is left is the transaction machinery) and is not durable, except
/// flush_new_blocks, the durable way covered blocks were written before 2026-12-06.
struct switch_name {
    const char* name;
    tlptm::detail::mutation m;
};
constexpr switch_name attribution_switches[] = {
    {"none", tlptm::detail::mutation::none},
    {"no_commit_fence", tlptm::detail::mutation::no_commit_fence},
    {"no_write_back_flush", tlptm::detail::mutation::no_write_back_flush},
    {"no_persistence", tlptm::detail::mutation::no_persistence},
    {"flush_new_blocks", tlptm::detail::mutation::flush_new_blocks},
};

tlptm::detail::mutation switch_of(const std::string& v) {
    for (const switch_name& w : attribution_switches)
        if (v == w.name)
            return w.m;
    throw usage_error("--compare mutation: the values are none, no_commit_fence (commits skip "
                      "F1), no_write_back_flush (eager commits skip the previous write-back's "
                      "flushes), no_persistence (commits write no entry and flush nothing) and "
                      "flush_new_blocks (durable: the blocks an entry covers are flushed, not "
                      "streamed, and adaptive write-back flushes at such commits), got '" +
                      v + "'");
}

/// Switches the library's attribution switch (a no-op without the hooks, where knob::mutation
/// is refused anyway).
void set_switch([[maybe_unused]] tlptm::detail::mutation m) noexcept {
#if defined(TLPTM_SCHED_HOOKS)
    tlptm::detail::active_mutation.store(m, std::memory_order_relaxed);
#endif
}

struct comparison {
    knob what = knob::log_write;
    std::string name;     ///< the option as written: "log_write"
    std::string value[2]; ///< A's and B's value, spelled as the enumerator (or the number)
};

struct options {
    std::optional<comparison> cmp;
    workload wl = workload::c;
    std::size_t value_size = 8;
    std::uint64_t keys = 100000;
    std::uint64_t pairs = 40;
    std::uint64_t slice = 5000;
    std::uint64_t seed = 1;
    std::string pool_dir; ///< empty: /dev/shm, else $TMPDIR or /tmp
    std::string csv;
};

constexpr std::uint64_t preload_per_tx = 64;

void print_usage(std::FILE* out) {
    std::fprintf(
        out,
        "usage: paired_bench --compare OPTION=A,B [options]\n"
        "  --compare OPTION=A,B  the pool option compared, A's value then B's; one of\n"
        "                        log_write=automatic|non_temporal|non_temporal_lines|\n"
        "                        store_and_flush (two of them)\n"
        "                        new_block_write=automatic|non_temporal|store_and_flush (two)\n"
        "                        write_back=automatic|eager|lazy|prompt|adaptive (two)\n"
        "                        mode=baseline|aalo|cblo|tlptm (two of them)\n"
        "                        write_back_lines=N,M\n"
        "                        emulate_write_ns=N,M\n"
        "                        populate_ahead=true,false (or false,true)\n"
        "                        solo_after=N,M (0: never solo)\n"
        "                        mutation=none|no_commit_fence|no_write_back_flush|\n"
        "                                 no_persistence|flush_new_blocks\n"
        "                          (paired_bench_hooks only: B drops one persistence step, or\n"
        "                          all of them, and is not durable, or, flush_new_blocks,\n"
        "                          flushes covered blocks as before; both sides pay the test\n"
        "                          hooks' checks)\n"
        "                        (the same value twice is an A/A run: it should show nothing)\n"
        "                        The environment sets the options both sides share, as for\n"
        "                        tlptm-workloads (TLPTM_WRITE_BACK, TLPTM_LOG_WRITE, ...)\n"
        "  --workload a|b|c      a: 100%% inserts of new keys, b: 50%% inserts / 50%% updates,\n"
        "                        c: 100%% updates of existing keys (default c)\n"
        "  --value-size 8|64|256 bytes of a value (default 8)\n"
        "  --keys N              keys preloaded for b and c, not measured (default 100000)\n"
        "  --pairs P             measured pairs of slices (default 40; plus one warm-up pair)\n"
        "  --slice S             operations (= transactions) per slice (default 5000)\n"
        "  --seed N              random seed (default 1)\n"
        "  --pool-dir DIR        where the two pool files go (default /dev/shm, else $TMPDIR\n"
        "                        or /tmp); they are removed at exit\n"
        "  --csv FILE            one row per measured slice: pair, config, ns_per_op\n"
        "  --help                this text\n"
        "Exit status: 0 done, 1 a run failed or the tables do not hold what the run put in,\n"
        "2 a usage error or the pools could not be made.\n");
}

/// Sets the compared option to `v` in `o`; throws usage_error naming the accepted values.
void apply(knob k, const std::string& v, tlptm::pool_options& o) {
    switch (k) {
    case knob::log_write:
        for (auto w : {tlptm::log_write::automatic, tlptm::log_write::non_temporal,
                       tlptm::log_write::non_temporal_lines, tlptm::log_write::store_and_flush})
            if (v == tlptm::to_string(w)) {
                o.log_write = w;
                return;
            }
        throw usage_error("--compare log_write: the values are automatic, non_temporal, "
                          "non_temporal_lines and store_and_flush, got '" +
                          v + "'");
    case knob::new_block_write:
        for (auto w : {tlptm::log_write::automatic, tlptm::log_write::non_temporal,
                       tlptm::log_write::store_and_flush})
            if (v == tlptm::to_string(w)) {
                o.new_block_write = w;
                return;
            }
        throw usage_error("--compare new_block_write: the values are automatic, non_temporal and "
                          "store_and_flush, got '" +
                          v + "'");
    case knob::write_back:
        if (const auto w = workloads::parse_write_back(v)) {
            o.write_back = *w;
            return;
        }
        throw usage_error("--compare write_back: the values are automatic, eager, lazy, prompt "
                          "and adaptive, got '" +
                          v + "'");
    case knob::mode:
        for (auto m : {tlptm::log_mode::baseline, tlptm::log_mode::aalo, tlptm::log_mode::cblo,
                       tlptm::log_mode::tlptm})
            if (v == tlptm::to_string(m)) {
                o.mode = m;
                return;
            }
        throw usage_error("--compare mode: the values are baseline, aalo, cblo and tlptm, got '" +
                          v + "'");
    case knob::write_back_lines: {
        const std::uint64_t n = parse_u64("--compare write_back_lines", v);
        // The library treats 0 as 1; refuse it rather than compare two names of one value.
        if (n < 1 || n > (std::uint64_t{1} << 24))
            throw usage_error("--compare write_back_lines: a count of lines in 1..16777216, got '" +
                              v + "'");
        o.write_back_lines = static_cast<std::size_t>(n);
        return;
    }
    case knob::emulate_write_ns: {
        const std::uint64_t n = parse_u64("--compare emulate_write_ns", v);
        if (n > 1000000)
            throw usage_error("--compare emulate_write_ns: at most 1000000 (1 ms per line)");
        o.emulate_write_ns = static_cast<std::uint32_t>(n);
        return;
    }
    case knob::solo_after: {
        const std::uint64_t n = parse_u64("--compare solo_after", v);
        if (n > 0xFFFFFFFFu)
            throw usage_error("--compare solo_after: a count of transactions below 2^32, got '" +
                              v + "'");
        o.solo_after = static_cast<std::uint32_t>(n);
        return;
    }
    case knob::populate_ahead:
        if (v == "true" || v == "false") {
            o.populate_ahead = v == "true";
            return;
        }
        throw usage_error("--compare populate_ahead: the values are true and false, got '" + v +
                          "'");
    case knob::mutation:
        (void)switch_of(v); // validates; not a pool option
        return;
    }
}

comparison parse_compare(const std::string& spec) {
    const std::size_t eq = spec.find('=');
    if (eq == std::string::npos)
        throw usage_error("--compare needs OPTION=A,B (e.g. write_back=eager,lazy), got '" + spec +
                          "'");
    comparison c;
    c.name = spec.substr(0, eq);
    if (c.name == "log_write")
        c.what = knob::log_write;
    else if (c.name == "new_block_write")
        c.what = knob::new_block_write;
    else if (c.name == "write_back")
        c.what = knob::write_back;
    else if (c.name == "mode")
        c.what = knob::mode;
    else if (c.name == "write_back_lines")
        c.what = knob::write_back_lines;
    else if (c.name == "emulate_write_ns")
        c.what = knob::emulate_write_ns;
    else if (c.name == "populate_ahead")
        c.what = knob::populate_ahead;
    else if (c.name == "solo_after")
        c.what = knob::solo_after;
    else if (c.name == "mutation" && have_hooks)
        c.what = knob::mutation;
    else if (c.name == "mutation")
        throw usage_error("--compare mutation needs paired_bench_hooks (built with the library's "
                          "test hooks); this program is paired_bench");
    else
        throw usage_error("--compare: unknown option '" + c.name +
                          "' (log_write, new_block_write, write_back, mode, write_back_lines, "
                          "emulate_write_ns, populate_ahead or solo_after)");
    const std::vector<std::string> values = split(std::string_view(spec).substr(eq + 1));
    if (values.size() != 2)
        throw usage_error("--compare " + c.name + " needs exactly two values, A,B, got '" +
                          spec.substr(eq + 1) + "'");
    for (int i = 0; i < 2; ++i) {
        tlptm::pool_options probe;
        apply(c.what, values[i], probe); // validates; the pools get it later
        // Numbers are printed as parsed ("007" would otherwise read as another value).
        c.value[i] = c.what == knob::write_back_lines   ? std::to_string(probe.write_back_lines)
                     : c.what == knob::emulate_write_ns ? std::to_string(*probe.emulate_write_ns)
                     : c.what == knob::solo_after       ? std::to_string(probe.solo_after)
                                                        : values[i];
    }
    return c;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_value = false;
        if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg.resize(eq);
            has_value = true;
        }
        auto need = [&]() -> const std::string& {
            if (!has_value) {
                if (i + 1 >= argc)
                    throw usage_error(arg + " needs a value");
                value = argv[++i];
                has_value = true;
            }
            if (value.empty())
                throw usage_error(arg + " needs a value");
            return value;
        };
        if (arg == "--help" || arg == "-h") {
            print_usage(stdout);
            std::exit(0);
        } else if (arg == "--compare") {
            o.cmp = parse_compare(need());
        } else if (arg == "--workload") {
            const std::string& w = need();
            if (w != "a" && w != "b" && w != "c")
                throw usage_error("--workload must be a, b or c, got '" + w + "'");
            o.wl = static_cast<workload>(w[0] - 'a');
        } else if (arg == "--value-size") {
            o.value_size = parse_u64(arg, need());
            if (o.value_size != 8 && o.value_size != 64 && o.value_size != 256)
                throw usage_error("--value-size must be 8, 64 or 256, got '" + value + "'");
        } else if (arg == "--keys") {
            o.keys = parse_u64(arg, need());
            if (o.keys > (std::uint64_t{1} << 30))
                throw usage_error("--keys is at most 2^30");
        } else if (arg == "--pairs") {
            o.pairs = parse_u64(arg, need());
            if (o.pairs < 1 || o.pairs > 100000)
                throw usage_error("--pairs must be in 1..100000");
        } else if (arg == "--slice") {
            o.slice = parse_u64(arg, need());
            if (o.slice < 1 || o.slice > 100000000)
                throw usage_error("--slice must be in 1..100000000");
        } else if (arg == "--seed") {
            o.seed = parse_u64(arg, need());
        } else if (arg == "--pool-dir") {
            o.pool_dir = need();
        } else if (arg == "--csv") {
            o.csv = need();
        } else {
            throw usage_error("unknown option '" + arg + "'");
        }
    }
    if (!o.cmp)
        throw usage_error("--compare OPTION=A,B is required");
    if (o.wl != workload::a && o.keys == 0)
        throw usage_error(std::string("workload ") + static_cast<char>('a' + int(o.wl)) +
                          " updates existing keys: it needs --keys of at least 1");
    if (o.wl != workload::c && (o.pairs + 1) * o.slice > (std::uint64_t{1} << 30))
        throw usage_error("(pairs + 1) x slice inserts are at most 2^30");
    return o;
}

/// /dev/shm (RAM, the paper's NVM emulation), else $TMPDIR or /tmp.
std::string default_pool_dir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0)
        return "/dev/shm";
    fs::path tmp = fs::temp_directory_path(ec); // $TMPDIR, else /tmp
    return ec ? std::string("/tmp") : tmp.string();
}

/// `path` if no file is there: a file this program did not make is never removed.
/// @throw setup_error the file exists
std::string new_pool_path(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec))
        throw setup_error("the pool file " + path + " exists; remove it or give another " +
                          "--pool-dir");
    return path;
}

/// Key number `id` (ids 0, 1, 2, ...): a bijective mix, so the keys are spread as random keys
/// are and their chains have the lengths of random keys; never 0 (mix64(x) is 0 only for 0).
constexpr std::uint64_t key_of(std::uint64_t id) noexcept {
    return mix64(id + 1);
}

/// One configuration: its pool, its table, and what was done to them. Not movable: the table
/// points at the pool.
template <std::size_t N> struct side {
    using value_type = value_t<N>;
    using table_type = tlptm_ht::hashtable<value_type>;

    side(const std::string& path, const tlptm::pool_options& o, std::uint64_t buckets)
        : file(new_pool_path(path)), pool(create_pool(path, o)),
          table(create_table(pool, buckets)) {}
    side(const side&) = delete;
    side& operator=(const side&) = delete;
    ~side() {
        try {
            pool.close();
        } catch (...) {
            // The file is removed next anyway.
        }
    }

    static tlptm::pool create_pool(const std::string& path, const tlptm::pool_options& o) {
        try {
            return tlptm::pool::create(path, o);
        } catch (const std::exception& e) {
            throw setup_error(std::string("cannot create the pool: ") + e.what());
        }
    }
    static table_type create_table(tlptm::pool& p, std::uint64_t buckets) {
        try {
            return table_type::create(p, buckets);
        } catch (const std::exception& e) {
            throw setup_error(std::string("cannot create the table: ") + e.what());
        }
    }

    workloads::file_remover file; // first: destroyed last, after the pool is closed
    tlptm::pool pool;
    table_type table;
    std::uint64_t next_id = 0; ///< ids [0, next_id) were inserted (preloaded or in a slice)
    std::uint64_t updated = 0;
    std::uint64_t missing = 0;   ///< updates that did not find their key (a failure)
    std::uint64_t duplicate = 0; ///< inserts that found their new key present (a failure)
    tlptm::stats measured{};     ///< summed over the measured slices
    tlptm::detail::mutation mut = tlptm::detail::mutation::none; ///< set during its slices
    std::vector<double> ns_per_op;                               ///< one per measured pair
};

template <std::size_t N> value_t<N> incremented(const value_t<N>& old) noexcept {
    if constexpr (N == 8) {
        return old + 1;
    } else {
        value_t<N> v = old;
        for (std::uint64_t& w : v)
            ++w;
        return v;
    }
}

/// Runs one slice of `ops` operations on `s` with the random stream `stream` and returns its
/// ns per operation. Both halves of a pair get the same stream and start from tables with the
/// same ids, so they do the same operations on the same keys.
template <std::size_t N>
double run_slice(side<N>& s, workload wl, std::uint64_t ops, std::uint64_t stream, bool measured) {
    using clock = std::chrono::steady_clock;
    workloads::rng r{stream};
    const value_t<N> fresh = workloads::make_value<N>(value_kind::small, 1);
    const tlptm::stats before = s.pool.stats();
    const auto t0 = clock::now();
    for (std::uint64_t i = 0; i < ops; ++i) {
        const bool insert = wl == workload::a || (wl == workload::b && (r.next() & 1) != 0);
        if (insert) {
            // The id is used up even by a failed insert, so that both pools keep the same ids.
            if (!s.table.insert(key_of(s.next_id++), fresh))
                ++s.duplicate;
        } else if (s.table.update_with(key_of(r.below(s.next_id)), incremented<N>)) {
            ++s.updated;
        } else {
            ++s.missing;
        }
    }
    const auto t1 = clock::now();
    if (measured)
        s.measured = s.measured + (s.pool.stats() - before);
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(ops);
}

/// Inserts ids [0, keys) with the initial value 1, preload_per_tx per transaction.
template <std::size_t N> void preload(side<N>& s, std::uint64_t keys) {
    const value_t<N> fresh = workloads::make_value<N>(value_kind::small, 1);
    for (std::uint64_t first = 0; first < keys; first += preload_per_tx) {
        const std::uint64_t last = std::min(keys, first + preload_per_tx);
        std::uint64_t duplicates = 0;
        tlptm::atomic(s.pool, [&] {
            duplicates = 0; // the body may run again
            for (std::uint64_t id = first; id < last; ++id)
                if (!s.table.insert(key_of(id), fresh))
                    ++duplicates;
        });
        s.duplicate += duplicates;
    }
    s.next_id = keys;
}

/// Checks a table after the run: every id inserted is found, no other key is, every value is
/// well formed (all its words equal: none torn), and since every value started at 1 and every
/// update added 1 to it, the values sum to the keys plus the updates. "" or what is wrong.
template <std::size_t N> std::string verify(side<N>& s) {
    if (s.duplicate != 0)
        return std::to_string(s.duplicate) + " inserts found their new key already present";
    if (s.missing != 0)
        return std::to_string(s.missing) + " updates did not find their key";
    const std::uint64_t keys = s.next_id;
    if (const std::uint64_t n = s.table.size(); n != keys)
        return "size() is " + std::to_string(n) + ", expected " + std::to_string(keys);
    if (const std::uint64_t n = s.table.count_nodes(); n != keys)
        return "the chains hold " + std::to_string(n) + " nodes, expected " + std::to_string(keys);
    std::uint64_t sum = 0;
    for (std::uint64_t id = 0; id < keys; ++id) {
        const std::optional<value_t<N>> v = s.table.lookup(key_of(id));
        if (!v)
            return "key number " + std::to_string(id) + " is missing";
        if constexpr (N != 8)
            for (std::uint64_t w : *v)
                if (w != (*v)[0])
                    return "the value of key number " + std::to_string(id) + " is torn";
        sum += workloads::seed_of<N>(*v);
    }
    if (sum != keys + s.updated)
        return "the values sum to " + std::to_string(sum) + ", expected " + std::to_string(keys) +
               " keys x 1 + " + std::to_string(s.updated) +
               " updates = " + std::to_string(keys + s.updated);
    if (s.table.lookup(key_of(keys)))
        return "key number " + std::to_string(keys) + " was never inserted but is found";
    return "";
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// P(X = k) for X ~ binomial(n, 1/2), in log space (2^-n underflows from n = 1075).
double binomial_half_pmf(std::uint64_t n, std::uint64_t k) {
    const double nd = static_cast<double>(n), kd = static_cast<double>(k);
    return std::exp(std::lgamma(nd + 1) - std::lgamma(kd + 1) - std::lgamma(nd - kd + 1) -
                    nd * std::log(2.0));
}

/// P(X <= k) for X ~ binomial(n, 1/2).
double binomial_half_cdf(std::uint64_t n, std::uint64_t k) {
    double sum = 0;
    for (std::uint64_t i = 0; i <= k && i <= n; ++i)
        sum += binomial_half_pmf(n, i);
    return std::min(sum, 1.0);
}

const char* workload_text(workload wl) {
    switch (wl) {
    case workload::a:
        return "a (100 % inserts of new keys)";
    case workload::b:
        return "b (50 % inserts of new keys / 50 % updates of existing keys)";
    case workload::c:
        return "c (100 % updates of existing keys)";
    }
    return "?";
}

template <std::size_t N> int run(const options& o, const std::string& dir) {
    const comparison& cmp = *o.cmp;
    const std::uint64_t keys = o.wl == workload::a ? 0 : o.keys;
    const std::uint64_t rounds = o.pairs + 1; // the warm-up pair first
    // The most keys a table holds by the end, which sizes the buckets (as the driver: the next
    // power of two, so chains are short) and the pool.
    const std::uint64_t max_keys = keys + (o.wl == workload::c ? 0 : rounds * o.slice);
    const std::uint64_t buckets = std::bit_ceil(std::max<std::uint64_t>(max_keys, 16));

    tlptm::pool_options base;
    base.durability = tlptm::durability::emulate_pmem;
    base.max_threads = 2; // this thread; one spare
    // Room for the nodes in their size class (the allocator rounds up to a power of two), the
    // bucket array, and the log rings; twice over, plus 64 MiB, as the driver sizes its pools.
    const std::uint64_t node_bytes = std::bit_ceil(sizeof(typename side<N>::table_type::node_type));
    base.size = (std::size_t{64} << 20) + std::size_t{base.max_threads} * (std::size_t{2} << 20) +
                2 * (max_keys * node_bytes + buckets * 8);
    // The options both sides share may come from the environment (TLPTM_WRITE_BACK,
    // TLPTM_LOG_WRITE, ...: workloads::apply_env_options); the compared one is set after.
    workloads::apply_env_options(base);
    // The watermark is read by lazy write-back, and by adaptive for the lines it defers:
    // compared under eager write-back it would compare nothing, so it is compared under lazy.
    if (cmp.what == knob::write_back_lines)
        base.write_back = tlptm::write_back::lazy;
    tlptm::pool_options opt[2] = {base, base};
    for (int i = 0; i < 2; ++i)
        apply(cmp.what, cmp.value[i], opt[i]);

    const std::string stem = dir + "/paired_bench-" + std::to_string(::getpid());
    const std::string paths[2] = {stem + "-A.pool", stem + "-B.pool"};
    workloads::remove_pool_on_interrupt(paths[0], paths[1]);
    side<N> a(paths[0], opt[0], buckets);
    side<N> b(paths[1], opt[1], buckets);
    side<N>* sides[2] = {&a, &b};
    if (cmp.what == knob::mutation)
        for (int i = 0; i < 2; ++i)
            sides[i]->mut = switch_of(cmp.value[i]);

    std::printf("paired_bench: workload %s, values %zu B, %llu keys preloaded, %llu pairs x %llu "
                "ops (+1 warm-up pair), seed %llu\n",
                workload_text(o.wl), N, static_cast<unsigned long long>(keys),
                static_cast<unsigned long long>(o.pairs), static_cast<unsigned long long>(o.slice),
                static_cast<unsigned long long>(o.seed));
    std::printf("  compared: %s, A = %s, B = %s; everything else equal; pair i runs A then B "
                "for even i, B then A for odd i\n",
                cmp.name.c_str(), cmp.value[0].c_str(), cmp.value[1].c_str());
    if (cmp.what == knob::write_back_lines)
        std::printf("  both pools use write_back=lazy: the watermark applies to lazy write-back "
                    "only\n");
    if (cmp.what == knob::mutation)
        std::printf("  attribution: a side with a switch other than none is not durable (it "
                    "drops a persistence step); the library's test hooks are compiled in, both "
                    "sides pay their checks\n");
    // Unless compared, the emulated latency is the library's default: the environment's.
    std::string write_ns = "0 ns";
    if (cmp.what == knob::emulate_write_ns)
        write_ns = "as compared";
    else if (const char* env = std::getenv("TLPTM_EMULATE_WRITE_NS"); env != nullptr)
        write_ns = std::string(env) + " ns per line (TLPTM_EMULATE_WRITE_NS)";
    std::printf("  pools: %s/paired_bench-%d-{A,B}.pool, %.0f MiB each, %llu buckets, "
                "durability emulate_pmem, emulated write latency %s\n",
                dir.c_str(), static_cast<int>(::getpid()),
                static_cast<double>(base.size) / (1 << 20),
                static_cast<unsigned long long>(buckets), write_ns.c_str());
    for (int i = 0; i < 2; ++i)
        std::printf("  log entries of %c: %s; write-back %s\n", "AB"[i],
                    workloads::describe_log_write(sides[i]->pool.chosen_log_write()).c_str(),
                    workloads::describe_write_back(sides[i]->pool.chosen_write_back(),
                                                   opt[i].write_back,
                                                   sides[i]->pool.chosen_log_write())
                        .c_str());
    std::fflush(stdout);

    preload(a, keys);
    preload(b, keys);
    // Each thread's one-time set-up (its slot, the first touch of its log ring's pages) before
    // the clock starts, as a long-running program pays it once.
    a.pool.prepare_thread();
    b.pool.prepare_thread();

    for (std::uint64_t round = 0; round < rounds; ++round) {
        const bool warm_up = round == 0;
        const std::uint64_t pair = warm_up ? 0 : round - 1;
        // The same stream for both halves of the pair, a new one for every pair.
        const std::uint64_t stream =
            mix64(mix64(o.seed ^ 0x9A12ED00ull) + round) ^ (static_cast<std::uint64_t>(o.wl) << 56);
        // ABBA: the order alternates, so that whatever the first slice of a pair leaves to the
        // second (a cache, a pending write-back of the other pool) falls on A and B alike.
        const int first = !warm_up && pair % 2 == 1 ? 1 : 0;
        for (int k = 0; k < 2; ++k) {
            side<N>& s = *sides[first ^ k];
            set_switch(s.mut);
            const double ns = run_slice(s, o.wl, o.slice, stream, !warm_up);
            set_switch(tlptm::detail::mutation::none);
            if (!warm_up)
                s.ns_per_op.push_back(ns);
        }
    }

    // The data first: a result from a broken table is not a result.
    int status = 0;
    for (int i = 0; i < 2; ++i) {
        if (std::string e = verify(*sides[i]); !e.empty()) {
            std::fprintf(stderr, "paired_bench: pool %c (%s=%s) FAILED verification: %s\n", "AB"[i],
                         cmp.name.c_str(), cmp.value[i].c_str(), e.c_str());
            status = 1;
        }
    }
    if (a.next_id != b.next_id || a.updated != b.updated) {
        std::fprintf(
            stderr,
            "paired_bench: the pools did different operations (A: %llu keys, %llu "
            "updates; B: %llu keys, %llu updates)\n",
            static_cast<unsigned long long>(a.next_id), static_cast<unsigned long long>(a.updated),
            static_cast<unsigned long long>(b.next_id), static_cast<unsigned long long>(b.updated));
        status = 1;
    }
    if (status != 0)
        return status;

    for (int i = 0; i < 2; ++i) {
        const side<N>& s = *sides[i];
        const tlptm::stats& m = s.measured;
        const double tx = static_cast<double>(std::max<std::uint64_t>(m.tx_committed, 1));
        std::vector<double> mops;
        for (double ns : s.ns_per_op)
            mops.push_back(1e3 / ns);
        std::printf("%c %s=%s: median %.1f ns/op (min %.1f, max %.1f), %.3f M ops/s; per tx: "
                    "fences %.2f, round trips %.2f, lines %.2f (log %.2f), log B %.1f, PM B "
                    "%.1f; solo %.0f %%\n",
                    "AB"[i], cmp.name.c_str(), cmp.value[i].c_str(), median(s.ns_per_op),
                    *std::min_element(s.ns_per_op.begin(), s.ns_per_op.end()),
                    *std::max_element(s.ns_per_op.begin(), s.ns_per_op.end()), median(mops),
                    static_cast<double>(m.fences) / tx, static_cast<double>(m.round_trips) / tx,
                    static_cast<double>(m.flushed_lines + m.log_lines_flushed) / tx,
                    static_cast<double>(m.log_lines_flushed) / tx,
                    static_cast<double>(m.log_bytes) / tx,
                    static_cast<double>(m.pm_bytes_written()) / tx, 100.0 * m.solo_share());
    }

    // The paired result. Sign test: under "no difference" each pair is as likely to favour A as
    // B, so the count of pairs where B was faster is binomial(n, 1/2) (ties left out).
    const std::uint64_t p = o.pairs;
    std::vector<double> d(p);
    std::uint64_t b_faster = 0, ties = 0;
    for (std::uint64_t i = 0; i < p; ++i) {
        d[i] = b.ns_per_op[i] - a.ns_per_op[i];
        b_faster += d[i] < 0 ? 1 : 0;
        ties += d[i] == 0 ? 1 : 0;
    }
    const std::uint64_t n = p - ties;
    const double p_value =
        n == 0 ? 1.0 : std::min(1.0, 2 * binomial_half_cdf(n, std::min(b_faster, n - b_faster)));
    const double med = median(d);
    const double med_a = median(a.ns_per_op);
    const std::string tie_text = ties ? ", " + std::to_string(ties) + " ties" : "";
    std::printf("paired (B - A): median %+.1f ns/op (%+.1f %% of A's median); B faster in %llu "
                "of %llu pairs%s; sign test p = %.2g (two-sided, exact binomial)\n",
                med, 100 * med / med_a, static_cast<unsigned long long>(b_faster),
                static_cast<unsigned long long>(p), tie_text.c_str(), p_value);
    // The distribution-free interval of the median: between the r-th smallest and the r-th
    // largest difference, r the largest rank with P(binomial(P, 1/2) < r) <= 2.5 %.
    std::uint64_t r = 0;
    double below = 0; // P(X < r + 1), summed as r grows
    while (r < p / 2 && (below += binomial_half_pmf(p, r)) <= 0.025)
        ++r;
    std::sort(d.begin(), d.end());
    bool resolved = false;
    if (r == 0) {
        std::printf("  95 %% interval of the median difference: none, %llu pairs are too few "
                    "(it needs 6)\n",
                    static_cast<unsigned long long>(p));
    } else {
        const double lo = d[r - 1], hi = d[p - r];
        std::printf("  95 %% interval of the median difference: [%+.1f, %+.1f] ns/op (the "
                    "differences of ranks %llu and %llu of %llu, coverage %.1f %%)\n",
                    lo, hi, static_cast<unsigned long long>(r),
                    static_cast<unsigned long long>(p - r + 1), static_cast<unsigned long long>(p),
                    100 * (1 - 2 * binomial_half_cdf(p, r - 1)));
        resolved = lo > 0 || hi < 0;
    }
    if (resolved) {
        const int faster = med < 0 ? 1 : 0;
        std::printf("  result: %c (%s=%s) is faster, by %.1f ns/op (%.1f %%)\n", "AB"[faster],
                    cmp.name.c_str(), cmp.value[faster].c_str(), std::fabs(med),
                    100 * std::fabs(med) / med_a);
    } else {
        std::printf("  result: no difference resolved (%s)\n",
                    r == 0 ? "too few pairs for an interval" : "the interval contains 0");
    }
    std::printf("verified: in both pools all %llu keys found, none other, no value torn, the "
                "values sum to keys + %llu updates\n",
                static_cast<unsigned long long>(a.next_id),
                static_cast<unsigned long long>(a.updated));

    if (!o.csv.empty()) {
        std::FILE* f = std::fopen(o.csv.c_str(), "w");
        bool ok = f != nullptr && std::fprintf(f, "pair,config,ns_per_op\n") > 0;
        for (std::uint64_t i = 0; ok && i < p; ++i)
            for (int k = 0; ok && k < 2; ++k)
                ok = std::fprintf(f, "%llu,%c,%.2f\n", static_cast<unsigned long long>(i), "AB"[k],
                                  sides[k] -> ns_per_op[i]) > 0;
        if (f != nullptr && std::fclose(f) != 0)
            ok = false;
        if (!ok) {
            std::fprintf(stderr, "paired_bench: cannot write %s: %s\n", o.csv.c_str(),
                         std::strerror(errno));
            return 1;
        }
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    options o;
    try {
        o = parse(argc, argv);
    } catch (const usage_error& e) {
        std::fprintf(stderr, "paired_bench: %s\n\n", e.what());
        print_usage(stderr);
        return 2;
    }
    const std::string dir = o.pool_dir.empty() ? default_pool_dir() : o.pool_dir;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
        std::fprintf(stderr, "paired_bench: --pool-dir %s is not a directory\n", dir.c_str());
        return 2;
    }
    try {
        switch (o.value_size) {
        case 8:
            return run<8>(o, dir);
        case 64:
            return run<64>(o, dir);
        case 256:
            return run<256>(o, dir);
        }
        return 2;
    } catch (const setup_error& e) {
        std::fprintf(stderr, "paired_bench: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "paired_bench: the run failed: %s\n", e.what());
        return 1;
    }
}
