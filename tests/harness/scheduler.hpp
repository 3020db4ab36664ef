// Crash-consistency harness: a seeded scheduler that serialises the threads of a scenario.
//
// The threads of a scheduled scenario run one at a time. At every scheduling point — the
// library's synchronisation points (tlptm::detail::sched, compiled in with TLPTM_SCHED_HOOKS),
// every call of the tracing persistence policy (tracer.hpp), and the scenario's own points
// (transaction starts, explicit yields) — the running thread asks the scheduler which thread
// continues; the others wait on a condition variable. The choice is a function of the seed and
// of the sequence of points, so a seed replays the same interleaving.
//
// Strategies (chosen from the seed, schedule_options::for_seed):
// - random walk: at every point, with probability 1 / walk_switch, a thread chosen uniformly
//   among the other runnable ones continues (a hand-over costs a thread wake-up);
// - PCT (probabilistic concurrency testing, Burckhardt et al. 2010): random distinct thread
//   priorities, the runnable thread of highest priority runs; at d - 1 random steps the running
//   thread's priority drops below every other. Long runs of one thread while another is parked
//   in the middle of an operation (inside checkpoint(), between a store and its flush) are
//   likely, which random walks almost never produce. Besides the d - 1 change points at random
//   steps, each fence is a change point with probability 1 / fence_change: a thread parked just
//   before it makes its stores durable, while the others act on what they can already see, is
//   where crash-consistency bugs between threads live. A persistence call on a control line
//   (the pool header, with CT) is a change point with probability
//   1 / control_change: a CT stored but not yet fenced is what other threads must not trust.
//
// Threads that block inside the library (a spin lock, an orec held by a parked thread, a mutex
// held by a parked thread, waiting for CT in reserve_ring) would deadlock a strict scheduler:
// - a thread that reaches the same point (kind and address) spin_repeats times in a row is
//   spinning: it yields to another runnable thread (and, under PCT, loses its priority);
// - a running thread that reaches no point for `stall` is presumed blocked: it is "detached"
//   (it keeps running on its own until its next point, where it waits for its turn again) and
//   another thread gets the turn. While a thread is detached, the running thread waits up to
//   `grace` at each of its points for it to come back (a lock it waits for may be free
//   between two of the runner's operations), so that a blocked thread of higher priority is
//   not starved by one that runs on. A stall makes the run timing-dependent: the stats count
//   them;
// - no point but waits for `deadlock` while threads remain: a true deadlock (or threads that
//   only wait for each other). The run fails with
//   the seed, the threads are released (the scheduler stops scheduling), and if they still do
//   not finish the process aborts with the message;
// - more than max_points points: a livelock (a transaction that never completes). The run
//   fails with the seed; from then on the threads are released and the next transaction start
//   or commit point of each throws run_aborted to end it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <tlptm/tlptm.hpp>

namespace tlptm_harness {

/// The kind of a scheduling point. Library points keep their tlptm::detail::sched_point value.
namespace point {
inline constexpr std::uint8_t stream = 32, stored = 33, flush = 34, fence = 35, tx_begin = 36,
                              user = 37, wait = 38,
                              /// persistence calls on a control line: the pool header (CT,
                              /// root), which other threads' decisions depend on; a fence
                              /// that completes such a flush
    stored_ctl = 39, flush_ctl = 40, fence_ctl = 41;
inline bool is_fence(std::uint8_t k) {
    return k == fence || k == fence_ctl;
}
inline bool is_control(std::uint8_t k) {
    return k == stored_ctl || k == flush_ctl || k == fence_ctl;
}
} // namespace point

inline const char* point_name(std::uint8_t k) {
    static const char* lib[] = {"tx_begin",   "orec_lock", "orec_unlock", "clock",
                                "in_flight",  "ct_read",   "ct_write",    "reclaim",
                                "write_back", "slot",      "spin"};
    if (k < sizeof lib / sizeof *lib)
        return lib[k];
    switch (k) {
    case point::stream:
        return "stream";
    case point::stored:
        return "stored";
    case point::flush:
        return "flush";
    case point::fence:
        return "fence";
    case point::tx_begin:
        return "atomic";
    case point::user:
        return "user";
    case point::wait:
        return "wait";
    case point::stored_ctl:
        return "stored (control line)";
    case point::flush_ctl:
        return "flush (control line)";
    case point::fence_ctl:
        return "fence (control line)";
    default:
        return "?";
    }
}

/// Thrown at a transaction start or commit point once a run is aborted (livelock). Not a
/// std::exception, so the scenario's handlers do not catch it by accident.
struct run_aborted {};

struct schedule_options {
    std::uint64_t seed = 1;
    bool pct = true;
    unsigned pct_depth = 3;        ///< d: d - 1 priority change points
    std::uint64_t pct_steps = 600; ///< change points fall in [1, pct_steps]
    unsigned walk_switch = 4;      ///< random walk: switch at a point with probability 1/this
    unsigned fence_change = 12;    ///< PCT: a fence is a change point with probability 1/this
    unsigned control_change = 2;   ///< PCT: the same for a control line's store/flush/fence
    unsigned spin_repeats = 6;     ///< same point this often in a row: the thread spins
    std::chrono::milliseconds stall{15};
    std::chrono::microseconds grace{300};
    std::chrono::milliseconds deadlock{3000};
    std::uint64_t max_points = 60000;

    /// The strategy of a seed: one seed in three a random walk, else PCT of depth 2..4.
    static schedule_options for_seed(std::uint64_t seed) {
        schedule_options o;
        o.seed = seed;
        o.pct = seed % 3 != 0;
        o.pct_depth = 2 + static_cast<unsigned>(seed / 3 % 3);
        return o;
    }

    std::string describe() const {
        return "seed " + std::to_string(seed) +
               (pct ? " (PCT, depth " + std::to_string(pct_depth) + ")" : " (random walk)");
    }
};

struct schedule_stats {
    std::uint64_t points = 0, switches = 0, stalls = 0, spin_yields = 0;
    std::string failure;           ///< deadlock or livelock, with the seed
    std::uint64_t fingerprint = 0; ///< hash of the sequence of running threads
};

class scheduler {
public:
    explicit scheduler(schedule_options o) : opt_(o), rng_(o.seed * 0x9E3779B97F4A7C15ull + 1) {
        const char* v = std::getenv("TLPTM_SCHED_TRACE");
        verbose_ = v && *v && *v != '0' ? *v - '0' : 0;
    }
    scheduler(const scheduler&) = delete;
    scheduler& operator=(const scheduler&) = delete;

    const schedule_options& options() const noexcept { return opt_; }
    const schedule_stats& stats() const noexcept { return stats_; }

    /// Runs every body on its own thread, one at a time under the scheduler's control; returns
    /// when all have finished. body(i) gets its worker index. The first exception a body lets
    /// escape (other than run_aborted) is rethrown.
    void run(const std::vector<std::function<void(int)>>& bodies) {
        const int n = static_cast<int>(bodies.size());
        {
            std::lock_guard lk(m_);
            state_.assign(static_cast<std::size_t>(n), st::ready);
            turn_wait_.assign(static_cast<std::size_t>(n), 0);
            prio_.resize(static_cast<std::size_t>(n));
            last_key_.assign(static_cast<std::size_t>(n), ~std::uint64_t{0});
            repeats_.assign(static_cast<std::size_t>(n), 0);
            for (int i = 0; i < n; ++i)
                prio_[static_cast<std::size_t>(i)] = static_cast<int>(opt_.pct_depth) + i;
            std::shuffle(prio_.begin(), prio_.end(), rng_);
            change_.clear();
            for (unsigned k = 1; k < opt_.pct_depth; ++k)
                change_.push_back(1 + rng_() % opt_.pct_steps);
            holder_ = pick(-1, false);
            state_[static_cast<std::size_t>(holder_)] = st::running;
            last_progress_ = last_work_ = clock::now();
        }
        current().store(this);
        install_hook(true);
        std::vector<std::exception_ptr> failed(static_cast<std::size_t>(n));
        std::vector<std::thread> threads;
        for (int i = 0; i < n; ++i)
            threads.emplace_back([this, i, &bodies, &failed] {
                me() = i;
                {
                    std::unique_lock lk(m_);
                    wait_turn(lk, i);
                }
                try {
                    // On a thread of its own, so that its exit (the library settles and
                    // releases the thread's slot then) is scheduled too.
                    in_new_thread([&] { bodies[static_cast<std::size_t>(i)](i); });
                } catch (const run_aborted&) {
                } catch (...) {
                    failed[static_cast<std::size_t>(i)] = std::current_exception();
                }
                finish(i);
                me() = -1;
            });
        watch();
        for (auto& t : threads)
            t.join();
        install_hook(false);
        current().store(nullptr);
        for (auto& f : failed)
            if (f)
                std::rethrow_exception(f);
    }

    /// Runs fn on a new thread with the calling worker's identity, and waits for it: the
    /// thread's exit (the library releases its slot then) is part of the schedule.
    void in_new_thread(const std::function<void()>& fn) {
        const int i = me();
        std::exception_ptr failed;
        std::thread t([&] {
            me() = i;
            try {
                fn();
            } catch (...) {
                failed = std::current_exception();
            }
        });
        t.join();
        if (failed)
            std::rethrow_exception(failed);
    }

    /// Called (from the watchdog thread) when a run is aborted: the sweep poisons the pool so
    /// that threads spinning inside the library without a scheduling point give up.
    void on_abort(std::function<void()> f) { on_abort_ = std::move(f); }

    /// A scheduling point of the calling thread (a no-op outside a scheduled run).
    static void yield(std::uint8_t kind, const void* addr) {
        scheduler* s = current().load(std::memory_order_acquire);
        if (s && me() >= 0)
            s->at_point(me(), kind, addr);
    }

    /// A scenario's own scheduling point.
    static void yield() { yield(point::user, nullptr); }

    /// A scenario's thread waits for another one (in a loop): another runnable thread gets the
    /// turn (under PCT the waiter loses its priority); if there is none, the waiter sleeps a
    /// moment. Not counted as progress: a wait for a thread that never comes is a deadlock.
    static void wait() { yield(point::wait, nullptr); }

private:
    enum class st : std::uint8_t { ready, running, detached, done };
    using clock = std::chrono::steady_clock;

    static std::atomic<scheduler*>& current() {
        static std::atomic<scheduler*> c{nullptr};
        return c;
    }
    static int& me() {
        static thread_local int i = -1;
        return i;
    }

#if defined(TLPTM_SCHED_HOOKS)
    static void lib_hook(tlptm::detail::sched_point p, const void* addr) {
        yield(static_cast<std::uint8_t>(p), addr);
    }
    static void install_hook(bool on) {
        tlptm::detail::sched_hook = on ? &lib_hook : nullptr;
    }
#else
    static void install_hook(bool) {}
#endif

    /// Points where run_aborted may be thrown: a transaction start, or a commit before it has
    /// persisted anything (the library unwinds from there).
    static bool throwable(std::uint8_t kind) {
        return kind == point::tx_begin || kind == point::user || kind == point::wait ||
               kind == static_cast<std::uint8_t>(tlptm::detail::sched_point::orec_lock);
    }

    void at_point(int i, std::uint8_t kind, const void* addr) {
        std::unique_lock lk(m_);
        if (aborting_) {
            if (throwable(kind) && !released_)
                throw run_aborted{};
            if (kind == point::wait) {
                lk.unlock();
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            }
            return;
        }
        const bool waiting = kind == point::wait;
        if (!waiting) {
            ++stats_.points;
            last_progress_ = last_work_ = clock::now();
        }
        auto& s = state_[static_cast<std::size_t>(i)];
        if (stats_.points > opt_.max_points) {
            fail("livelock: more than " + std::to_string(opt_.max_points) +
                 " scheduling points (a transaction never completes?), last at " +
                 point_name(kind) + " of worker " + std::to_string(i));
            if (throwable(kind))
                throw run_aborted{};
            return;
        }
        if (s == st::detached) { // back from a stall: wait for a turn like everybody
            wait_turn(lk, i);
            return;
        }
        if (detached_ > 0) {  // give a blocked thread the chance to come back first
            in_grace_ = true; // at a point, not blocked: the watchdog leaves it alone
            cv_.wait_for(lk, opt_.grace, [&] { return detached_ == 0 || aborting_; });
            in_grace_ = false;
        }
        const std::uint64_t key = reinterpret_cast<std::uintptr_t>(addr) * 64 + kind;
        auto& last = last_key_[static_cast<std::size_t>(i)];
        auto& rep = repeats_[static_cast<std::size_t>(i)];
        bool spinning = waiting;
        if (waiting) {
        } else if (key == last) {
            spinning = ++rep >= opt_.spin_repeats;
        } else {
            last = key;
            rep = 0;
        }
        if (opt_.pct &&
            ((point::is_control(kind) && opt_.control_change > 0 &&
              rng_() % opt_.control_change == 0) ||
             (point::is_fence(kind) && opt_.fence_change > 0 && rng_() % opt_.fence_change == 0)))
            prio_[static_cast<std::size_t>(i)] = --lowest_; // parked before it persists
        int next = pick(i, spinning);
        if (verbose_ > 1)
            std::fprintf(stderr, "[sched %llu] worker %d at %s (%p)\n",
                         static_cast<unsigned long long>(stats_.points), i, point_name(kind), addr);
        if (verbose_ && next != i)
            std::fprintf(stderr, "[sched %llu] worker %d at %s (%p) -> worker %d%s\n",
                         static_cast<unsigned long long>(stats_.points), i, point_name(kind), addr,
                         next, spinning ? " (spinning)" : "");
        if (spinning && next != i) {
            ++stats_.spin_yields;
            rep = 0;
        }
        if (next != i) {
            s = st::ready;
            hand_to(next);
            wait_turn(lk, i);
        } else if (waiting) {
            lk.unlock();
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
    }

    void hand_to(int next) {
        ++stats_.switches;
        holder_ = next;
        if (next >= 0) {
            state_[static_cast<std::size_t>(next)] = st::running;
            stats_.fingerprint =
                (stats_.fingerprint ^ static_cast<std::uint64_t>(next + 1)) * 0x100000001b3ull;
        }
        last_progress_ = clock::now();
        cv_.notify_all();
    }

    /// While a thread waits here it is not blocked in the library: the turn handed to it may
    /// take a loaded machine longer than `stall` to wake it, and the watchdog must not detach
    /// it then (a detached thread waiting for its turn is never picked again: a deadlock).
    /// A detached thread (back from a stall, or detached before it first ran: starting a thread
    /// on a loaded machine can take longer than `stall`) is ready again first, and takes the
    /// turn if nobody holds it.
    void wait_turn(std::unique_lock<std::mutex>& lk, int i) {
        auto& s = state_[static_cast<std::size_t>(i)];
        if (s == st::detached) {
            s = st::ready;
            --detached_;
            cv_.notify_all();
            if (holder_ < 0) {
                holder_ = i;
                s = st::running;
            }
        }
        turn_wait_[static_cast<std::size_t>(i)] = 1;
        cv_.wait(lk, [&] { return holder_ == i || aborting_; });
        turn_wait_[static_cast<std::size_t>(i)] = 0;
        state_[static_cast<std::size_t>(i)] = st::running;
    }

    /// The thread that continues after `cur` (-1: none) reached a point.
    int pick(int cur, bool spinning) {
        ++step_;
        std::vector<int> cand;
        for (int j = 0; j < static_cast<int>(state_.size()); ++j)
            if (j != cur && state_[static_cast<std::size_t>(j)] == st::ready)
                cand.push_back(j);
        if (cur >= 0 && opt_.pct)
            for (std::size_t k = 0; k < change_.size(); ++k)
                if (change_[k] == step_)
                    prio_[static_cast<std::size_t>(cur)] = static_cast<int>(k) - 1000;
        if (cur >= 0 && state_[static_cast<std::size_t>(cur)] == st::running) {
            if (spinning && !cand.empty()) {
                if (opt_.pct) // a spinning thread waits for a lower one: let it run
                    prio_[static_cast<std::size_t>(cur)] = --lowest_;
            } else {
                cand.push_back(cur);
            }
        }
        if (cand.empty())
            return -1;
        if (!opt_.pct) {
            const bool running = cur >= 0 && !cand.empty() && cand.back() == cur &&
                                 state_[static_cast<std::size_t>(cur)] == st::running;
            if (running && (cand.size() == 1 || rng_() % std::max(opt_.walk_switch, 1u) != 0))
                return cur;
            std::size_t others = cand.size() - (running ? 1 : 0);
            return cand[rng_() % others];
        }
        return *std::max_element(cand.begin(), cand.end(), [&](int a, int b) {
            return prio_[static_cast<std::size_t>(a)] < prio_[static_cast<std::size_t>(b)];
        });
    }

    void finish(int i) {
        std::lock_guard lk(m_);
        if (state_[static_cast<std::size_t>(i)] == st::detached)
            --detached_;
        state_[static_cast<std::size_t>(i)] = st::done;
        if ((holder_ == i || holder_ < 0) && !aborting_)
            hand_to(pick(-1, false));
        cv_.notify_all();
    }

    void fail(const std::string& why) {
        if (stats_.failure.empty())
            stats_.failure = why + " [" + opt_.describe() + "]";
        aborting_ = true;
        cv_.notify_all();
    }

    bool all_done() const {
        return std::all_of(state_.begin(), state_.end(), [](st s) { return s == st::done; });
    }

    /// The watchdog (the thread that called run()): stalls, deadlocks.
    void watch() {
        std::unique_lock lk(m_);
        clock::time_point aborted_at{};
        while (!all_done()) {
            cv_.wait_for(lk, std::chrono::milliseconds(1));
            if (all_done())
                break;
            const auto now = clock::now();
            if (aborting_) {
                if (aborted_at == clock::time_point{}) {
                    aborted_at = now;
                    if (on_abort_)
                        on_abort_();
                }
                if (now - aborted_at > std::chrono::seconds(2))
                    released_ = true; // stop throwing: let them finish however they can
                if (now - aborted_at > opt_.deadlock + std::chrono::seconds(5)) {
                    std::fprintf(stderr,
                                 "tlptm harness: the threads of a scheduled run do not finish "
                                 "after: %s\n",
                                 stats_.failure.c_str());
                    std::abort();
                }
                continue;
            }
            if (holder_ < 0 &&
                std::any_of(state_.begin(), state_.end(), [](st x) { return x == st::ready; })) {
                hand_to(pick(-1, false)); // nobody holds the turn but somebody waits for it
                continue;
            }
            if (holder_ >= 0 && !in_grace_ && !turn_wait_[static_cast<std::size_t>(holder_)] &&
                now - last_progress_ > opt_.stall) {
                ++stats_.stalls;
                if (verbose_)
                    std::fprintf(stderr, "[sched %llu] worker %d stalled (blocked?)\n",
                                 static_cast<unsigned long long>(stats_.points), holder_);
                state_[static_cast<std::size_t>(holder_)] = st::detached;
                ++detached_;
                int blocked = holder_;
                holder_ = -1;
                int next = pick(blocked, false);
                hand_to(next);
                continue;
            }
            // No counted point (waits do not count) for that long: nobody makes progress,
            // whether the turn is held by a waiter or by nobody.
            if (now - last_work_ > opt_.deadlock) {
                std::string who;
                for (std::size_t j = 0; j < state_.size(); ++j)
                    if (state_[j] != st::done)
                        who += (who.empty() ? "" : ", ") + std::to_string(j);
                fail("deadlock: workers " + who + " reached no scheduling point for " +
                     std::to_string(opt_.deadlock.count()) + " ms");
                if (const char* g = std::getenv("TLPTM_SCHED_GDB"); g && *g == '1') {
                    // Where the threads are stuck: every thread's stack, from gdb.
                    std::string cmd = "gdb -p " + std::to_string(::getpid()) +
                                      " -batch -ex 'thread apply all bt' 1>&2";
                    if (std::system(cmd.c_str()) != 0)
                        std::fprintf(stderr, "tlptm harness: could not run gdb\n");
                }
            }
        }
    }

    schedule_options opt_;
    std::mt19937_64 rng_;
    std::mutex m_;
    std::condition_variable cv_;
    std::vector<st> state_;
    std::vector<int> prio_;
    std::vector<std::uint64_t> change_;
    std::vector<std::uint64_t> last_key_;
    std::vector<unsigned> repeats_;
    std::vector<char> turn_wait_; ///< per thread: inside wait_turn
    int holder_ = -1;
    int detached_ = 0;
    int lowest_ = -2000;
    std::uint64_t step_ = 0;
    bool aborting_ = false, released_ = false, in_grace_ = false;
    int verbose_ = 0;
    clock::time_point last_progress_{}, last_work_{};
    schedule_stats stats_;
    std::function<void()> on_abort_;
};

} // namespace tlptm_harness
