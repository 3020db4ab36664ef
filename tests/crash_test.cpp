// Crash consistency of tlptm (DESIGN.md §4 commit protocol, §5 invariants I1, I2, I5).
//
// Two kinds of crashes:
//
// - SIGKILL of a child process at a random instant. The page cache keeps every store the child
//   made, so this is the "everything up to here was stored" crash of a process.
//
// - A crash at an exact fence of the persistence path, in a child that runs with a
//   crash_policy (pool_options::policy). The policy keeps a copy of what is durable: the file
//   as it was when the child started, plus every line that a fence completed (a flushed line
//   with its content at flush time, streamed bytes). At the chosen fence, before or after its
//   effect, it rewrites every line that is not durable to one of the values x86 persistency
//   allows after a power failure (the durable copy, the current content, or for a line in
//   flight the content it was flushed or streamed with) and calls _exit. Which choice per
//   line is the plan's `keep`: none (only what fences made durable survives), all (the page
//   cache: every store survives), random, or a choice about the rings' header lines.
//
// The policy also classifies fences: a fence with streamed bytes pending is an F1 (the commit
// point of the entry streamed before it), so the test knows which transactions committed.

#include "test_util.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using tlptm::detail::pool_header;
using tlptm_test::small_options;
using tlptm_test::temp_path;

// ---- files and processes ---------------------------------------------------------------------

using tlptm_test::read_file;
using tlptm_test::write_file;

/// Reads the pool header from a file (no library code involved).
pool_header read_header(const std::string& path) {
    pool_header h{};
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
        throw std::runtime_error("cannot read the header of " + path);
    ::close(fd);
    return h;
}

template <class T> T value_in(const std::vector<std::uint8_t>& image, std::uint64_t offset) {
    T v;
    REQUIRE(offset + sizeof v <= image.size());
    std::memcpy(&v, image.data() + offset, sizeof v);
    return v;
}

/// In a child: die of a crash signal itself rather than through doctest's crash report.
void default_crash_signals() {
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
        std::signal(sig, SIG_DFL);
}

std::string describe_status(int status) {
    if (WIFEXITED(status))
        return "exit " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
}

// ---- the crash policy ------------------------------------------------------------------------

enum class phase : std::uint8_t { before, after };

/// Which lines that are not durable keep their current content at the crash.
enum class keep : std::uint8_t {
    none,              ///< only what fences made durable survives
    all,               ///< every store survives (a killed process)
    random,            ///< per line: durable, current or in-flight content, at random
    ring_headers_lost, ///< everything survives but the rings' header lines
    ring_headers_only, ///< nothing survives but the rings' header lines
};

const char* to_string(keep k) {
    switch (k) {
    case keep::none:
        return "none";
    case keep::all:
        return "all";
    case keep::random:
        return "random";
    case keep::ring_headers_lost:
        return "ring_headers_lost";
    case keep::ring_headers_only:
        return "ring_headers_only";
    }
    return "?";
}

struct crash_plan {
    std::uint64_t fence = 0; ///< crash at this fence (1 = the first one); 0: never
    phase at = phase::before;
    keep lines = keep::all;
    std::uint64_t seed = 1;
    bool count_f1 = false; ///< `fence` counts F1s only: crash at the fence-th F1
};

/// What a child's policy saw; sent to the parent through a pipe.
struct crash_report {
    std::uint64_t fences = 0;  ///< fences issued, the crash fence included
    std::uint64_t f1_done = 0; ///< completed fences that had streamed bytes pending (F1s)
    std::uint64_t wraps = 0;   ///< entries streamed below the previous entry of their ring
    std::uint8_t crashed = 0;
    std::uint8_t at_f1 = 0;        ///< the crash fence had streamed bytes pending
    std::uint64_t f1[8] = {};      ///< the fence numbers of the first F1s
    std::uint64_t wrap_f1[8] = {}; ///< the fence numbers of the first F1s after a ring wrap
};

class crash_policy final : public tlptm::persist_policy {
public:
    /// Takes the file's current bytes as what is durable. The pool must be opened after this.
    crash_policy(const std::string& path, crash_plan plan, int report_fd)
        : plan_(plan), fd_(report_fd) {
        pool_header h = read_header(path);
        base_ = reinterpret_cast<std::uint8_t*>(h.base_address);
        size_ = h.pool_size;
        log_begin_ = h.log_offset;
        ring_size_ = h.ring_size;
        log_end_ = h.log_offset + std::uint64_t{h.max_threads} * h.ring_size;
        last_pos_.assign(h.max_threads, 0);
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        durable_.resize(size_);
        if (fd < 0 || ::pread(fd, durable_.data(), size_, 0) != static_cast<ssize_t>(size_))
            throw std::runtime_error("cannot read " + path);
        ::close(fd);
    }

    void stream(void* dst, const void* src, std::size_t n) override {
        std::memcpy(dst, src, n);
        std::uint64_t off = offset(dst);
        if (off >= log_begin_ && off < log_end_) {
            std::uint64_t ring = (off - log_begin_) / ring_size_;
            std::uint64_t pos = (off - log_begin_) % ring_size_;
            if (pos < last_pos_[ring]) {
                ++rep_.wraps;
                wrap_pending_ = true;
            }
            last_pos_[ring] = pos;
        }
        // Only the streamed bytes go out: merge them into the line's in-flight content.
        for (std::uint64_t o = off; o < off + n;) {
            std::uint64_t line = o / 64;
            std::uint64_t end = std::min<std::uint64_t>(off + n, (line + 1) * 64);
            auto [it, fresh] = pending_.try_emplace(line);
            if (fresh)
                std::memcpy(it->second.data(), durable_.data() + line * 64, 64);
            std::memcpy(it->second.data() + (o - line * 64), base_ + o, end - o);
            o = end;
        }
        streamed_ = true;
    }

    void flush(const void* addr, std::size_t n) override {
        std::uint64_t off = offset(addr);
        for (std::uint64_t line = off / 64; line * 64 < off + n; ++line)
            std::memcpy(pending_[line].data(), base_ + line * 64, 64);
    }

    void fence() override {
        ++rep_.fences;
        const bool f1 = streamed_;
        const bool hit =
            plan_.count_f1 ? f1 && rep_.f1_done + 1 == plan_.fence : rep_.fences == plan_.fence;
        if (hit && plan_.at == phase::before)
            crash(f1);
        for (const auto& [line, bytes] : pending_)
            std::memcpy(durable_.data() + line * 64, bytes.data(), 64);
        pending_.clear();
        streamed_ = false;
        if (f1) {
            if (rep_.f1_done < std::size(rep_.f1))
                rep_.f1[rep_.f1_done] = rep_.fences;
            ++rep_.f1_done;
            if (wrap_pending_ && wrap_f1_count_ < std::size(rep_.wrap_f1))
                rep_.wrap_f1[wrap_f1_count_++] = rep_.fences;
            wrap_pending_ = false;
        }
        if (hit && plan_.at == phase::after)
            crash(f1);
    }

    /// Sends the report of a run that did not crash.
    void finish() { send(); }

private:
    std::uint64_t offset(const void* p) const {
        auto a = reinterpret_cast<std::uintptr_t>(p);
        auto b = reinterpret_cast<std::uintptr_t>(base_);
        if (a < b || a - b >= size_) {
            std::fprintf(stderr, "crash_policy: an address outside the pool\n");
            ::_exit(90);
        }
        return a - b;
    }

    bool ring_header_line(std::uint64_t line) const {
        std::uint64_t off = line * 64;
        return off >= log_begin_ && off < log_end_ && (off - log_begin_) % ring_size_ == 0;
    }

    /// Leaves every line that is not durable at a value allowed by the plan, reports, exits.
    [[noreturn]] void crash(bool at_f1) {
        rep_.crashed = 1;
        rep_.at_f1 = at_f1 ? 1 : 0;
        if (plan_.lines != keep::all) {
            std::mt19937_64 rng(plan_.seed);
            for (std::uint64_t line = 0; line < size_ / 64; ++line) {
                std::uint8_t* cur = base_ + line * 64;
                const std::uint8_t* dur = durable_.data() + line * 64;
                auto inflight = pending_.find(line);
                bool dirty = std::memcmp(cur, dur, 64) != 0;
                if (!dirty && inflight == pending_.end())
                    continue;
                const std::uint8_t* pick = cur;
                switch (plan_.lines) {
                case keep::none:
                    pick = dur;
                    break;
                case keep::all:
                    break;
                case keep::random: {
                    unsigned choice =
                        static_cast<unsigned>(rng() % (inflight == pending_.end() ? 2 : 3));
                    pick = choice == 0 ? dur : choice == 1 ? cur : inflight->second.data();
                    break;
                }
                case keep::ring_headers_lost:
                    pick = ring_header_line(line) ? dur : cur;
                    break;
                case keep::ring_headers_only:
                    pick = ring_header_line(line) ? cur : dur;
                    break;
                }
                if (pick != cur)
                    std::memmove(cur, pick, 64);
            }
        }
        send();
        ::_exit(0);
    }

    void send() {
        if (fd_ < 0)
            return;
        const auto* p = reinterpret_cast<const char*>(&rep_);
        std::size_t left = sizeof rep_;
        while (left > 0) {
            ssize_t put = ::write(fd_, p, left);
            if (put <= 0)
                ::_exit(91);
            p += put;
            left -= static_cast<std::size_t>(put);
        }
    }

    crash_plan plan_;
    int fd_;
    std::uint8_t* base_ = nullptr;
    std::uint64_t size_ = 0, log_begin_ = 0, log_end_ = 0, ring_size_ = 0;
    std::vector<std::uint8_t> durable_;
    std::unordered_map<std::uint64_t, std::array<std::uint8_t, 64>> pending_;
    std::vector<std::uint64_t> last_pos_;
    bool streamed_ = false;
    bool wrap_pending_ = false;
    std::size_t wrap_f1_count_ = 0;
    crash_report rep_;
};

/// Runs body(policy) in a child process whose pool persistence goes through a crash_policy with
/// `plan`; returns the policy's report (of the crash, or of the whole run).
template <class Body>
crash_report run_crashing_child(const std::string& path, const crash_plan& plan, Body&& body) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        default_crash_signals();
        int code = 0;
        try {
            crash_policy policy(path, plan, fds[1]);
            body(policy);
            policy.finish();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "crash child: %s\n", e.what());
            code = 2;
        } catch (...) {
            code = 3;
        }
        ::_exit(code);
    }
    ::close(fds[1]);
    crash_report rep;
    std::size_t got = 0;
    auto* p = reinterpret_cast<char*>(&rep);
    while (got < sizeof rep) {
        ssize_t n = ::read(fds[0], p + got, sizeof rep - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += static_cast<std::size_t>(n);
    }
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                    "crash child: " << describe_status(status));
    REQUIRE(got == sizeof rep);
    return rep;
}

// ---- the bank: accounts whose sum never changes ----------------------------------------------

constexpr int n_accounts = 16;

struct bank {
    tlptm::p<std::int64_t> acc[n_accounts];
    tlptm::p<std::uint64_t> seq;
};

/// How many transfers a transaction makes (at random in [min, max]).
struct workload {
    int min_transfers;
    int max_transfers;
};

struct transfer {
    int from;
    int to;
    std::int64_t amount;
};

/// The transfers of transaction number k (deterministic, so that the parent knows the state
/// after any number of transactions).
std::vector<transfer> transfers_of(std::uint64_t k, workload w) {
    std::mt19937_64 rng(k * 0x9E3779B97F4A7C15ull + 0x1234567);
    int n =
        w.min_transfers +
        static_cast<int>(rng() % static_cast<std::uint64_t>(w.max_transfers - w.min_transfers + 1));
    std::vector<transfer> t;
    for (int i = 0; i < n; ++i) {
        int from = static_cast<int>(rng() % n_accounts);
        int to = static_cast<int>(
            (static_cast<std::uint64_t>(from) + 1 + rng() % (n_accounts - 1)) % n_accounts);
        t.push_back({from, to, static_cast<std::int64_t>(rng() % 1000) + 1});
    }
    return t;
}

using balances = std::array<std::int64_t, n_accounts>;

balances initial_balances() {
    balances b{};
    for (int i = 0; i < n_accounts; ++i)
        b[static_cast<std::size_t>(i)] = 1000 * (i + 1);
    return b;
}

const std::int64_t bank_total = [] {
    balances b = initial_balances();
    return std::accumulate(b.begin(), b.end(), std::int64_t{0});
}();

/// The balances after any number of transactions, computed without the library.
class bank_model {
public:
    explicit bank_model(workload w) : w_(w), state_(initial_balances()) {}

    const balances& at(std::uint64_t k) {
        if (k < k_) {
            state_ = initial_balances();
            k_ = 0;
        }
        while (k_ < k) {
            ++k_;
            for (const transfer& t : transfers_of(k_, w_)) {
                state_[static_cast<std::size_t>(t.from)] -= t.amount;
                state_[static_cast<std::size_t>(t.to)] += t.amount;
            }
        }
        return state_;
    }

private:
    workload w_;
    balances state_;
    std::uint64_t k_ = 0;
};

/// Creates a pool at `path` with the bank's initial balances (seq 0) and closes it.
void create_bank(const std::string& path, tlptm::log_mode mode) {
    auto pl = tlptm::pool::create(path, small_options(mode));
    bank* b = pl.root<bank>();
    tlptm::atomic(pl, [&] {
        balances init = initial_balances();
        for (int i = 0; i < n_accounts; ++i)
            b->acc[i] = init[static_cast<std::size_t>(i)];
        b->seq = 0;
    });
    pl.close();
}

/// One transaction: the transfers of number seq + 1, and seq += 1. Returns the new seq.
std::uint64_t bank_tx(tlptm::pool& pl, bank* b, workload w) {
    return tlptm::atomic(pl, [&] {
        std::uint64_t k = b->seq.get() + 1;
        for (const transfer& t : transfers_of(k, w)) {
            b->acc[t.from] -= t.amount;
            b->acc[t.to] += t.amount;
        }
        b->seq = k;
        return k;
    });
}

/// Checks that the open pool holds exactly the state after its seq transactions; returns seq.
std::uint64_t check_bank(tlptm::pool& pl, bank_model& model) {
    bank* b = pl.root<bank>();
    std::uint64_t seq = b->seq.get();
    balances have{};
    for (int i = 0; i < n_accounts; ++i)
        have[static_cast<std::size_t>(i)] = b->acc[i].get();
    CHECK(std::accumulate(have.begin(), have.end(), std::int64_t{0}) == bank_total);
    const balances& want = model.at(seq);
    CHECK_MESSAGE(have == want, "the balances are not those after transaction " << seq);
    return seq;
}

// ---- SIGKILL rounds ----------------------------------------------------------------------------

/// Forks a child that runs bank transactions forever in `threads` threads; after each atomic()
/// returns, the thread reports the new seq through a pipe. Kills the child with SIGKILL after
/// `delay` (counted from the first report if wait_first, else from the fork). Returns every
/// seq reported.
std::vector<std::uint64_t> kill_round(const std::string& path, const tlptm::pool_options& opt,
                                      workload w, int threads, std::chrono::microseconds delay,
                                      bool wait_first) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        default_crash_signals();
        try {
            auto pl = tlptm::pool::open(path, opt);
            bank* b = pl.root<bank>();
            auto work = [&] {
                try {
                    for (;;) {
                        std::uint64_t k = bank_tx(pl, b, w);
                        if (::write(fds[1], &k, sizeof k) != static_cast<ssize_t>(sizeof k))
                            ::_exit(4);
                    }
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "kill child: %s\n", e.what());
                }
                ::_exit(2);
            };
            for (int t = 1; t < threads; ++t)
                std::thread(work).detach();
            work();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "kill child: %s\n", e.what());
        }
        ::_exit(2);
    }
    ::close(fds[1]);
    std::vector<std::uint8_t> buf;
    auto read_some = [&] {
        std::uint8_t chunk[4096];
        ssize_t n = ::read(fds[0], chunk, sizeof chunk);
        if (n > 0)
            buf.insert(buf.end(), chunk, chunk + n);
        return n;
    };
    if (wait_first) {
        pollfd pfd{fds[0], POLLIN, 0};
        REQUIRE_MESSAGE(::poll(&pfd, 1, 20000) == 1, "the child never reported a transaction");
        while (buf.size() < 8)
            REQUIRE(read_some() > 0);
    }
    std::this_thread::sleep_for(delay);
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK_MESSAGE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL),
                  "the child ended before the kill: " << describe_status(status));
    while (read_some() > 0) {
    }
    ::close(fds[0]);
    // Pipe writes of 8 bytes are atomic: the stream holds whole reports only.
    CHECK(buf.size() % 8 == 0);
    std::vector<std::uint64_t> seqs(buf.size() / 8);
    if (!seqs.empty())
        std::memcpy(seqs.data(), buf.data(), seqs.size() * 8);
    return seqs;
}

/// Checks a round's reports against the seq found after recovery: every reported transaction
/// survived, each seq was reported once (no lost update), and at most one committed but
/// unreported transaction per thread. `before` is the seq before the round.
void check_reports(std::vector<std::uint64_t> seqs, std::uint64_t before, std::uint64_t after,
                   int threads) {
    if (threads == 1) {
        bool in_order = true;
        for (std::size_t i = 0; i < seqs.size(); ++i)
            in_order = in_order && seqs[i] == before + 1 + i;
        CHECK_MESSAGE(in_order, "the child's seq did not count up by one per transaction");
    }
    std::sort(seqs.begin(), seqs.end());
    CHECK_MESSAGE(std::adjacent_find(seqs.begin(), seqs.end()) == seqs.end(),
                  "two transactions returned the same seq");
    const std::uint64_t last = seqs.empty() ? before : seqs.back();
    CHECK_MESSAGE(after >= last, "a transaction whose atomic() returned is lost");
    CHECK_MESSAGE(after <= last + static_cast<std::uint64_t>(threads),
                  "more unreported transactions survived than there were threads");
    if (!seqs.empty())
        CHECK(seqs.front() > before);
    CHECK(after - before - seqs.size() <= static_cast<std::uint64_t>(threads));
}

/// Counters of a series of SIGKILL rounds.
struct kill_stats {
    std::uint64_t seq = 0;      ///< the pool's seq after the last round
    int rounds_replayed = 0;    ///< reopens whose recovery replayed at least one entry
    int rounds_unreported = 0;  ///< the child was killed before it reported anything
    int rounds_lost_report = 0; ///< rounds with committed transactions never reported
};

// ---- fixed words: every transaction sets the same value in words of distinct lines ----------

constexpr std::size_t fixed_words = 5;

struct alignas(64) fixed_line {
    tlptm::p<std::uint64_t> w;
};

struct fixed_root {
    fixed_line lines[fixed_words];
    tlptm::p<std::uint64_t> counter;
};

/// The value transaction i writes to every word (0 before the first one).
std::uint64_t fixed_value(std::uint64_t i) {
    return i == 0 ? 0 : (i * 0x9E3779B97F4A7C15ull) | 1;
}

void fixed_tx(tlptm::pool& pl, fixed_root* r, std::uint64_t i) {
    tlptm::atomic(pl, [&] {
        for (fixed_line& l : r->lines)
            l.w = fixed_value(i);
        r->counter = i;
    });
}

/// The counter of the open pool, after checking that every word holds that transaction's value
/// (the state is exactly the state after some prefix).
std::uint64_t fixed_state(tlptm::pool& pl) {
    fixed_root* r = pl.root<fixed_root>();
    std::uint64_t c = r->counter.get();
    for (std::size_t i = 0; i < fixed_words; ++i) {
        CAPTURE(i);
        CHECK_MESSAGE(r->lines[i].w.get() == fixed_value(c),
                      "word " << i << " is not the value of transaction " << c);
    }
    return c;
}

/// The same, read from a file image without the library (no recovery).
std::uint64_t fixed_counter_in(const std::vector<std::uint8_t>& image, const pool_header& h) {
    return value_in<std::uint64_t>(image, h.root_offset + offsetof(fixed_root, counter));
}
std::uint64_t fixed_word_in(const std::vector<std::uint8_t>& image, const pool_header& h,
                            std::size_t i) {
    return value_in<std::uint64_t>(image, h.root_offset + i * sizeof(fixed_line));
}

/// Creates a pool whose first `committed` fixed transactions are done, and closes it.
void create_fixed(const std::string& path, std::uint64_t committed, tlptm::log_mode mode) {
    auto pl = tlptm::pool::create(path, small_options(mode));
    fixed_root* r = pl.root<fixed_root>();
    for (std::uint64_t i = 1; i <= committed; ++i)
        fixed_tx(pl, r, i);
    pl.close();
}

/// Reopens a recovered pool and checks that recovery is idempotent: it replays nothing new and
/// shows the same state; so does recover() on the open pool.
void check_recovered_again(const std::string& path, std::uint64_t counter) {
    auto pl = tlptm::pool::open(path, small_options());
    CHECK(pl.last_recovery().entries_replayed == 0);
    CHECK(fixed_state(pl) == counter);
    tlptm::recovery_report rep = pl.recover();
    CHECK(rep.entries_replayed == 0);
    CHECK(fixed_state(pl) == counter);
}

} // namespace

// ---- (a) random SIGKILL ------------------------------------------------------------------------

TEST_CASE("SIGKILL at random instants loses no returned transaction and tears none") {
    temp_path path("sigkill");
    const workload w{2, 6};
    create_bank(path, tlptm::log_mode::tlptm);
    bank_model model(w);
    std::mt19937_64 rng(20240601);
    const tlptm::log_mode modes[] = {tlptm::log_mode::baseline, tlptm::log_mode::aalo,
                                     tlptm::log_mode::cblo, tlptm::log_mode::tlptm};
    const int rounds = 48;
    kill_stats st;
    for (int round = 0; round < rounds; ++round) {
        CAPTURE(round);
        tlptm::pool_options opt = small_options(modes[round % 4]);
        opt.durability =
            round % 3 == 2 ? tlptm::durability::msync : tlptm::durability::emulate_pmem;
        // Entries written every way whatever this machine's measurement picks for automatic.
        const tlptm::log_write ways[] = {
            tlptm::log_write::automatic, tlptm::log_write::non_temporal,
            tlptm::log_write::store_and_flush, tlptm::log_write::non_temporal_lines};
        opt.log_write = ways[(round / 2) % 4];
        // 1, 2 or 3 threads, each with every log mode.
        const int threads = 1 + (round / 4) % 3;
        CAPTURE(threads);
        // Every fourth round kills 0 .. 15 ms after the fork: the child may die while it opens
        // the pool and recovers the previous round's crash. The others kill after the first
        // report, after a log-uniform delay of 10 us .. 10 ms.
        const bool from_fork = round % 4 == 3;
        std::chrono::microseconds delay{0};
        if (from_fork)
            delay = std::chrono::microseconds(rng() % 15000);
        else
            delay = std::chrono::microseconds(static_cast<long>(std::exp(
                std::log(10.0) + std::log(1000.0) * static_cast<double>(rng() % 1000) / 1000.0)));
        const std::vector<std::uint64_t> seqs =
            kill_round(path, opt, w, threads, delay, !from_fork);
        if (seqs.empty())
            ++st.rounds_unreported;

        auto pl = tlptm::pool::open(path, small_options(modes[(round + 1) % 4]));
        if (pl.last_recovery().entries_replayed > 0)
            ++st.rounds_replayed;
        const std::uint64_t seq = check_bank(pl, model);
        check_reports(seqs, st.seq, seq, threads);
        if (seq > st.seq + seqs.size())
            ++st.rounds_lost_report;
        st.seq = seq;
        pl.close();
    }
    MESSAGE("SIGKILL: " << rounds << " rounds, " << st.seq << " transactions, "
                        << st.rounds_replayed << " recoveries replayed entries, "
                        << st.rounds_unreported << " kills before the first report, "
                        << st.rounds_lost_report << " with committed but unreported transactions");
    CHECK(st.seq >= static_cast<std::uint64_t>(rounds)); // the children made progress
}

// ---- (b) every fence of the commit path ------------------------------------------------------

TEST_CASE("a crash at any fence of the commit path recovers a prefix with every committed "
          "transaction") {
    for (auto [mode, wb] : {std::pair{tlptm::log_mode::baseline, tlptm::write_back::eager},
                            std::pair{tlptm::log_mode::tlptm, tlptm::write_back::eager},
                            std::pair{tlptm::log_mode::tlptm, tlptm::write_back::lazy},
                            std::pair{tlptm::log_mode::tlptm, tlptm::write_back::prompt},
                            std::pair{tlptm::log_mode::tlptm, tlptm::write_back::adaptive}}) {
        const std::string mode_name = tlptm::to_string(mode);
        const int write_back = static_cast<int>(wb); // 0 eager, 1 lazy, 2 prompt, 3 adaptive
        CAPTURE(mode_name);
        CAPTURE(write_back);
        temp_path path("fences");
        const std::uint64_t first = 2; // committed before the children run
        const std::uint64_t count = 3; // transactions each child runs
        create_fixed(path, first, mode);
        const pool_header h = read_header(path);
        const std::vector<std::uint8_t> pristine = read_file(path);
        auto body = [&](crash_policy& pol) {
            tlptm::pool_options opt = small_options(mode);
            opt.policy = &pol;
            opt.write_back = wb;
            auto pl = tlptm::pool::open(path, opt);
            fixed_root* r = pl.root<fixed_root>();
            for (std::uint64_t i = first + 1; i <= first + count; ++i)
                fixed_tx(pl, r, i);
            pl.close();
        };

        // A run without a crash: how many fences, and one F1 per transaction.
        const crash_report full = run_crashing_child(path, crash_plan{}, body);
        REQUIRE(full.crashed == 0);
        REQUIRE(full.f1_done == count);
        REQUIRE(full.fences >= full.f1_done);
        {
            auto pl = tlptm::pool::open(path, small_options());
            CHECK(fixed_state(pl) == first + count);
        }

        int crashes_between_f1_and_writeback = 0;
        for (std::uint64_t n = 1; n <= full.fences; ++n) {
            for (phase at : {phase::before, phase::after}) {
                for (keep k : {keep::none, keep::all, keep::random}) {
                    // With every store kept, "before" and "after" leave the same image.
                    if (k == keep::all && at == phase::after)
                        continue;
                    CAPTURE(n);
                    const std::string at_name = at == phase::before ? "before" : "after";
                    const std::string keep_name = to_string(k);
                    CAPTURE(at_name);
                    CAPTURE(keep_name);
                    write_file(path, pristine);
                    const crash_report rep =
                        run_crashing_child(path, crash_plan{n, at, k, n * 31 + 7}, body);
                    REQUIRE(rep.crashed == 1);
                    REQUIRE(rep.fences == n);
                    const std::uint64_t committed = first + rep.f1_done;
                    // Crashing before an F1 completes, the entry may or may not be durable.
                    const bool in_doubt = rep.at_f1 && at == phase::before;
                    const std::vector<std::uint8_t> image = read_file(path);

                    if (rep.at_f1 && at == phase::after) {
                        // Committed, not yet written back: the file holds the previous state or
                        // an older one (lazy: earlier write-backs wait for a batch; eager: the
                        // counter's line, written by every transaction, is flushed with the
                        // latest write-back only); only recovery can bring the transaction.
                        ++crashes_between_f1_and_writeback;
                        CHECK(fixed_counter_in(image, h) <= committed - 1);
                        for (std::size_t i = 0; i < fixed_words; ++i) { // whole words, no tear
                            const std::uint64_t w = fixed_word_in(image, h, i);
                            bool some = false;
                            for (std::uint64_t j = 1; j <= committed - 1; ++j)
                                some = some || w == fixed_value(j);
                            CHECK(some);
                        }
                    }

                    std::uint64_t c = 0;
                    {
                        auto pl = tlptm::pool::open(path, small_options());
                        const tlptm::recovery_report rr = pl.last_recovery();
                        c = fixed_state(pl);
                        CHECK(rr.checkpoint_after >= rr.checkpoint_before);
                        if (rep.at_f1 && at == phase::after) {
                            CHECK(rr.entries_replayed > 0);
                            CHECK(rr.records_replayed >= fixed_words + 1);
                        }
                    }
                    CHECK_MESSAGE(c >= committed, "a transaction that passed F1 is lost");
                    if (in_doubt)
                        CHECK(c <= committed + 1);
                    else
                        CHECK(c == committed);
                    if (k == keep::none)
                        CHECK(c == committed);
                    if (k == keep::all && in_doubt)
                        CHECK(c == committed + 1);

                    if (k == keep::random) { // (opens are what costs: one kind only)
                        check_recovered_again(path, c);
                        // Replaying the same crash image a second time gives the same state.
                        write_file(path, image);
                        auto pl = tlptm::pool::open(path, small_options());
                        CHECK(fixed_state(pl) == c);
                    }
                }
            }
        }
        CHECK(crashes_between_f1_and_writeback == static_cast<int>(2 * count));
    }
}

TEST_CASE("a crash during recovery, and during the recovery of that, gives a clean recovery's "
          "state") {
    temp_path path("recovery-crash");
    const std::uint64_t first = 2;
    create_fixed(path, first, tlptm::log_mode::tlptm);
    const pool_header h = read_header(path);

    // Crash a child between F1 and the write-back of its second transaction, with nothing of
    // the write-back durable.
    auto run_txs = [&](crash_policy& pol) {
        tlptm::pool_options opt = small_options();
        opt.policy = &pol;
        auto pl = tlptm::pool::open(path, opt);
        fixed_root* r = pl.root<fixed_root>();
        for (std::uint64_t i = first + 1; i <= first + 4; ++i)
            fixed_tx(pl, r, i);
        pl.close();
    };
    const std::vector<std::uint8_t> pristine = read_file(path);
    const crash_report full = run_crashing_child(path, crash_plan{}, run_txs);
    REQUIRE(full.f1_done == 4);
    const std::uint64_t second_f1 = full.f1[1];
    REQUIRE(second_f1 > 0);
    write_file(path, pristine);
    const crash_report at_f1 =
        run_crashing_child(path, crash_plan{second_f1, phase::after, keep::none}, run_txs);
    REQUIRE(at_f1.at_f1 == 1);
    REQUIRE(at_f1.f1_done == 2);
    const std::vector<std::uint8_t> crashed = read_file(path);
    // Not written back (lazy write-back: neither is the first transaction's, most likely).
    REQUIRE(fixed_counter_in(crashed, h) <= first + 1);

    // The reference: a recovery that runs to its end.
    std::uint64_t want = 0;
    {
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(pl.last_recovery().entries_replayed >= 1);
        want = fixed_state(pl);
        CHECK(want == first + 2);
    }

    auto just_open = [&](crash_policy& pol) {
        tlptm::pool_options opt = small_options();
        opt.policy = &pol;
        auto pl = tlptm::pool::open(path, opt);
        pl.close();
    };
    int recovery_crashes = 0;
    for (std::uint64_t n = 1; n <= 3; ++n) {
        for (phase at : {phase::before, phase::after}) {
            for (keep k : {keep::none, keep::all, keep::random}) {
                CAPTURE(n);
                const std::string at_name = at == phase::before ? "before" : "after";
                const std::string keep_name = to_string(k);
                CAPTURE(at_name);
                CAPTURE(keep_name);
                write_file(path, crashed);
                const crash_report rep =
                    run_crashing_child(path, crash_plan{n, at, k, 1000 + n}, just_open);
                if (rep.crashed)
                    ++recovery_crashes;
                auto pl = tlptm::pool::open(path, small_options());
                CHECK(fixed_state(pl) == want);
                pl.close();
                if (k == keep::random)
                    check_recovered_again(path, want);
            }
        }
    }
    // Recovery made its replayed data durable and then its checkpoint: two fences at least.
    CHECK(recovery_crashes >= 2 * 2 * 3);

    // Crashes during the recovery of a crashed recovery.
    std::mt19937_64 rng(99);
    for (int chain = 0; chain < 6; ++chain) {
        CAPTURE(chain);
        write_file(path, crashed);
        for (int depth = 0; depth < 3; ++depth) {
            crash_plan plan{1 + rng() % 2, rng() % 2 ? phase::after : phase::before, keep::random,
                            rng()};
            run_crashing_child(path, plan, just_open);
        }
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(fixed_state(pl) == want);
    }
}

// ---- (c) ring wrap-around ----------------------------------------------------------------------

TEST_CASE("crashes around ring wrap-arounds keep every committed transfer") {
    temp_path path("wrap");
    const workload w{2, 2}; // about 4 words per transaction
    const std::uint64_t total = 3000;
    // Baseline entries are 16 + 24 bytes per word: the 64 KiB ring wraps every ~500 entries.
    const tlptm::log_mode mode = tlptm::log_mode::baseline;
    create_bank(path, mode);
    const std::vector<std::uint8_t> pristine = read_file(path);
    bank_model model(w);

    auto body = [&](crash_policy& pol) {
        tlptm::pool_options opt = small_options(mode);
        opt.policy = &pol;
        auto pl = tlptm::pool::open(path, opt);
        bank* b = pl.root<bank>();
        for (std::uint64_t i = 0; i < total; ++i)
            bank_tx(pl, b, w);
        pl.close();
    };
    const crash_report full = run_crashing_child(path, crash_plan{}, body);
    REQUIRE(full.f1_done == total);
    REQUIRE(full.wraps >= 4);
    {
        auto pl = tlptm::pool::open(path, small_options());
        CHECK(check_bank(pl, model) == total);
    }

    // Around the first and the second wrap: F2 of the entry before the wrap, the checkpoint
    // that lets the ring be reused, F1 and F2 of the first entry of the new generation (the
    // fences are numbered from the wrapping entry's F1, W). Then a few fences at random.
    struct point {
        std::uint64_t fence;
        bool all_ways; // every phase and keep, or one random crash
    };
    std::vector<point> points;
    for (std::size_t j : {0, 1}) {
        REQUIRE(full.wrap_f1[j] > 3);
        for (std::uint64_t n = full.wrap_f1[j] - 2; n <= full.wrap_f1[j] + 1; ++n)
            points.push_back({n, true});
    }
    std::mt19937_64 rng(4711);
    for (int i = 0; i < 8; ++i)
        points.push_back({1 + rng() % full.fences, false});

    std::uint64_t crashed_at_wrap_f1 = 0;
    for (const point& pt : points) {
        const std::uint64_t n = pt.fence;
        const phase random_phase = rng() % 2 ? phase::after : phase::before;
        for (phase at : {phase::before, phase::after}) {
            for (keep k : {keep::none, keep::all, keep::random}) {
                if (k == keep::all && at == phase::after)
                    continue; // the same image as before the fence
                if (!pt.all_ways && (k != keep::random || at != random_phase))
                    continue;
                CAPTURE(n);
                const std::string at_name = at == phase::before ? "before" : "after";
                const std::string keep_name = to_string(k);
                CAPTURE(at_name);
                CAPTURE(keep_name);
                write_file(path, pristine);
                const crash_report rep =
                    run_crashing_child(path, crash_plan{n, at, k, n ^ 0x5555}, body);
                REQUIRE(rep.crashed == 1);
                if (std::find(std::begin(full.wrap_f1), std::end(full.wrap_f1), n) !=
                    std::end(full.wrap_f1))
                    ++crashed_at_wrap_f1;
                const std::uint64_t committed = rep.f1_done;
                const bool in_doubt = rep.at_f1 && at == phase::before;
                std::uint64_t seq = 0;
                {
                    auto pl = tlptm::pool::open(path, small_options());
                    seq = check_bank(pl, model);
                }
                CHECK_MESSAGE(seq >= committed, "a transaction that passed F1 is lost");
                CHECK(seq <= committed + (in_doubt ? 1 : 0));
                if (k == keep::none)
                    CHECK(seq == committed);
                if (k == keep::all && in_doubt)
                    CHECK(seq == committed + 1);
                if (k == keep::random) {
                    auto pl = tlptm::pool::open(path, small_options());
                    CHECK(pl.last_recovery().entries_replayed == 0);
                    CHECK(check_bank(pl, model) == seq);
                }
            }
        }
    }
    CHECK(crashed_at_wrap_f1 == 2 * 5);
}

TEST_CASE("SIGKILL while the log rings wrap around keeps every returned transfer") {
    temp_path path("wrap-kill");
    const workload w{2, 2};
    const tlptm::log_mode mode = tlptm::log_mode::baseline;
    create_bank(path, mode);
    bank_model model(w);
    std::mt19937_64 rng(1234);
    kill_stats st;
    int round = 0;
    const auto start = std::chrono::steady_clock::now();
    // At least 20 rounds and 6000 transactions (a dozen wraps of the 64 KiB ring), one or two
    // threads (two rings, each wrapping while the other one commits).
    while (round < 20 ||
           (st.seq < 6000 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))) {
        CAPTURE(round);
        const int threads = 1 + round % 2;
        std::chrono::microseconds delay(500 + rng() % 15000);
        const std::vector<std::uint64_t> seqs =
            kill_round(path, small_options(mode), w, threads, delay, true);
        auto pl = tlptm::pool::open(path, small_options(mode));
        if (pl.last_recovery().entries_replayed > 0)
            ++st.rounds_replayed;
        const std::uint64_t seq = check_bank(pl, model);
        check_reports(seqs, st.seq, seq, threads);
        st.seq = seq;
        pl.close();
        ++round;
    }
    MESSAGE("SIGKILL with wraps: " << round << " rounds, " << st.seq << " transactions, "
                                   << st.rounds_replayed << " recoveries replayed entries");
    CHECK(st.seq >= 6000);
}

// ---- a ring generation used twice ---------------------------------------------------------------

// A power failure before the F1 of the first entry of a ring generation may persist the entry
// (non-temporal stores) without the ring's header line (generation, base timestamp), if that
// line was only flushed, not fenced: the entry is sealed for generation G+1 while the ring says
// G, so recovery ignores it and the transaction is dropped. If the next opening then starts
// generation G+1 again with the same base timestamp (the clock is CT after recovery), the
// dropped entry becomes valid as soon as the new header line is durable, and a crash before
// the new first entry overwrites it brings the dropped transaction back. Step 1 and step 3
// below crash exactly there (the first F1 of an opening, or the first F1 after a wrap).
TEST_CASE("a transaction dropped by recovery stays dropped (ring generation reuse)") {
    // `wrap`: crash at the F1 after a ring wrap instead of the first F1 of the opening.
    for (bool wrap : {false, true}) {
        CAPTURE(wrap);
        temp_path path("generation-reuse");
        const std::uint64_t first = 1;
        create_fixed(path, first, tlptm::log_mode::baseline);
        const std::vector<std::uint8_t> pristine = read_file(path);
        const std::uint64_t many = 2000; // > 3 ring passes of 6-word baseline entries
        auto run_txs = [&](crash_policy& pol) {
            tlptm::pool_options opt = small_options(tlptm::log_mode::baseline);
            opt.policy = &pol;
            auto pl = tlptm::pool::open(path, opt);
            fixed_root* r = pl.root<fixed_root>();
            for (std::uint64_t i = first + 1; i <= first + many; ++i)
                fixed_tx(pl, r, i);
            pl.close();
        };
        // The first F1 of the opening, or the first F1 after a wrap.
        crash_plan plan{1, phase::before, keep::ring_headers_lost, 1, true};
        if (wrap) {
            const crash_report full = run_crashing_child(path, crash_plan{}, run_txs);
            REQUIRE(full.wraps >= 1);
            plan.fence = full.wrap_f1[0];
            plan.count_f1 = false;
            write_file(path, pristine);
        }

        // 1. The entry reaches persistent memory, the ring's header line does not.
        const crash_report one = run_crashing_child(path, plan, run_txs);
        REQUIRE(one.crashed == 1);
        REQUIRE(one.at_f1 == 1);
        const std::uint64_t dropped = first + one.f1_done + 1; // the transaction in flight

        // 2. Recovery: the transaction was in flight, it may be dropped or kept. (Here the entry
        //    does not validate: it is dropped.)
        std::uint64_t s1 = 0;
        {
            auto pl = tlptm::pool::open(path, small_options());
            s1 = fixed_state(pl);
            CHECK((s1 == dropped - 1 || s1 == dropped));
        }

        // 3. The next opening's first transaction (another value) crashes before its F1 with
        //    only the ring's new header line durable.
        const std::uint64_t other = 1000000;
        auto other_tx = [&](crash_policy& pol) {
            tlptm::pool_options opt = small_options(tlptm::log_mode::baseline);
            opt.policy = &pol;
            auto pl = tlptm::pool::open(path, opt);
            fixed_tx(pl, pl.root<fixed_root>(), other);
            pl.close();
        };
        const crash_report two = run_crashing_child(
            path, crash_plan{1, phase::before, keep::ring_headers_only, 1, true}, other_tx);
        REQUIRE(two.crashed == 1);
        REQUIRE(two.at_f1 == 1);
        REQUIRE(two.f1_done == 0);

        // 4. Nothing committed since step 2: the state is s1, or the in-flight transaction.
        auto pl = tlptm::pool::open(path, small_options());
        std::uint64_t c = fixed_state(pl);
        CHECK_MESSAGE((c == s1 || c == other), "recovery brought back transaction "
                                                   << c
                                                   << ", which the previous "
                                                      "recovery had dropped (state "
                                                   << s1 << ")");
    }
}
