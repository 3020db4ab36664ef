// Asymmetric fences (detail/asymmetric_fence.hpp): the store-buffering litmus test on two real
// threads. The frequent side publishes x (a plain store with asymmetric fences) and loads y;
// the rare side stores y, calls heavy_fence() and loads x. Both loads returning 0 is the
// outcome every Dekker-shaped protocol of the library (slot marks against exclusive sections
// and I3, in_flight against the checkpoint, a commit against a helper's settle) must exclude.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include <tlptm/detail/asymmetric_fence.hpp>
#include <tlptm/detail/stm.hpp>

namespace {

struct litmus_result {
    std::uint64_t runs = 0;
    std::uint64_t both_zero = 0; ///< the forbidden outcome
};

/// Runs the litmus `runs` times; the two threads meet before each run.
litmus_result store_buffering(std::uint64_t runs) {
    std::atomic<std::uint64_t> x{0}, y{0};
    std::atomic<std::uint64_t> go{0}, done_a{0}, done_b{0};
    std::uint64_t r1 = 0, r2 = 0;
    litmus_result res;
    std::thread frequent([&] {
        for (std::uint64_t k = 1; k <= runs; ++k) {
            while (go.load(std::memory_order_acquire) < k)
                tlptm::detail::cpu_relax();
            tlptm::detail::publish(x, std::uint64_t{1});
            r1 = y.load(std::memory_order_seq_cst);
            done_a.store(k, std::memory_order_release);
        }
    });
    for (std::uint64_t k = 1; k <= runs; ++k) {
        x.store(0, std::memory_order_relaxed);
        y.store(0, std::memory_order_relaxed);
        go.store(k, std::memory_order_release);
        // The other thread sees `go` some 50-200 ns later: sweep this side's start over that
        // window, so that the two sequences overlap in some runs.
        for (std::uint64_t d = 0; d < (k * 7) % 160; ++d)
            asm volatile("" ::: "memory"); // a delay the compiler keeps
        y.store(1, std::memory_order_seq_cst);
        tlptm::detail::heavy_fence();
        r2 = x.load(std::memory_order_seq_cst);
        done_b.store(k, std::memory_order_relaxed);
        while (done_a.load(std::memory_order_acquire) < k)
            tlptm::detail::cpu_relax();
        ++res.runs;
        if (r1 == 0 && r2 == 0)
            ++res.both_zero;
    }
    frequent.join();
    return res;
}

} // namespace

TEST_CASE("asymmetric fences: the store-buffering outcome never happens") {
    tlptm::detail::enable_asymmetric_fences();
    MESSAGE("asymmetric fences are "
            << (tlptm::detail::asymmetric_fences_on.load() ? "on (membarrier)"
                                                           : "off (locked instructions)"));
    const litmus_result r = store_buffering(20000);
    CHECK(r.runs == 20000);
    CHECK(r.both_zero == 0);
}

#if defined(TLPTM_SCHED_HOOKS)
TEST_CASE("mutation no_heavy_fence: the litmus test can see the outcome it excludes") {
    // Without the rare side's barrier, a plain store followed by a load may be reordered by
    // the CPU (its store buffer): the forbidden outcome shows whenever the two threads run at
    // the same moment. Informative only: on a loaded machine the threads may never overlap.
    tlptm::detail::enable_asymmetric_fences();
    if (!tlptm::detail::asymmetric_fences_on.load()) {
        MESSAGE("asymmetric fences are off: nothing to mutate");
        return;
    }
    tlptm::detail::active_mutation.store(tlptm::detail::mutation::no_heavy_fence);
    const litmus_result r = store_buffering(200000); // no system calls: fast
    tlptm::detail::active_mutation.store(tlptm::detail::mutation::none);
    CHECK(r.runs == 200000);
    MESSAGE("without the heavy fence: " << r.both_zero << " of " << r.runs
                                        << " runs had both loads return 0");
}
#endif
