// The durable checkpoint under concurrency (DESIGN I2, I3): a decision that relies on CT uses a
// CT value known durable, never the header word another thread has stored but not yet fenced.
//
// The scenario of the review that found the bug: thread A is inside checkpoint(), between the
// store of the new CT and its flush (a policy stalls it there). Thread B, whose superblock is
// full, needs a block: it reclaims a free whose timestamp the new (not yet durable) CT covers,
// writes a new object into it in place (AALO, unlogged), commits and returns. A crash then
// leaves the durable CT at its old value, so recovery replays an older logged update of the
// reused block over the new object of a transaction whose atomic returned.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>

#include "test_util.hpp"

namespace {

using tlptm_test::temp_path;

/// Persistence through plain stores (the pool file is in RAM: it is what a crash keeps), with
/// one trap: the flush of a chosen word stalls its thread until released.
class stalling_policy final : public tlptm_test::ram_policy {
public:
    void flush(const void* addr, std::size_t) override {
        if (addr != trap_.load())
            return;
        std::unique_lock lk(m_);
        stalled_ = true;
        cv_.notify_all();
        cv_.wait(lk, [&] { return released_; });
    }

    void arm(const void* word) { trap_.store(word); }
    bool wait_stalled(std::chrono::milliseconds limit) {
        std::unique_lock lk(m_);
        return cv_.wait_for(lk, limit, [&] { return stalled_; });
    }
    void release() {
        std::lock_guard lk(m_);
        released_ = true;
        trap_.store(nullptr);
        cv_.notify_all();
    }

private:
    std::atomic<const void*> trap_{nullptr};
    std::mutex m_;
    std::condition_variable cv_;
    bool stalled_ = false, released_ = false;
};

struct blob {
    tlptm::p<std::uint64_t> value;
    std::uint8_t pad[32768 - 8];
};
static_assert(sizeof(blob) == 32768); // two blocks fill a superblock

struct root {
    tlptm::p<blob*> x, y, z;
};

constexpr std::uint64_t old_value = 0x01d01d01d;
constexpr std::uint64_t new_value = 0x0e0e0e0e0e;

} // namespace

TEST_CASE("block reuse waits for a durable checkpoint, not for one another thread has only "
          "stored") {
    temp_path path("durable-ct");
    stalling_policy policy;
    auto pool = tlptm::pool::create(path, tlptm_test::options_with(policy));
    root* rt = pool.root<root>();
    auto& st = pool.state();
    const std::uint64_t ct_offset = offsetof(tlptm::detail::pool_header, checkpoint_ts);

    std::mutex m;
    std::condition_variable cv;
    bool setup_done = false, go = false;
    blob* z = nullptr;
    blob* x = nullptr;

    std::thread b([&] {
        // In B's own slot: X and Y fill one superblock of B's local heap, X gets a logged
        // update (an entry that recovery would replay), then X is freed.
        tlptm::atomic(pool, [&] {
            rt->x = static_cast<blob*>(tlptm::current_tx().alloc(sizeof(blob)));
            rt->y = static_cast<blob*>(tlptm::current_tx().alloc(sizeof(blob)));
            rt->x.get()->value = 1;
        });
        tlptm::atomic(pool, [&] { rt->x.get()->value = old_value; }); // logged
        x = rt->x.get();
        tlptm::atomic(pool, [&] {
            tlptm::destroy(rt->x.get());
            rt->x = nullptr;
        });
        {
            std::unique_lock lk(m);
            setup_done = true;
            cv.notify_all();
            cv.wait(lk, [&] { return go; });
        }
        // B's superblock is full: the allocation looks at pending frees.
        tlptm::atomic(pool, [&] {
            blob* n = static_cast<blob*>(tlptm::current_tx().alloc(sizeof(blob)));
            n->value = new_value; // AALO: in place, never logged
            rt->z = n;
        });
        z = rt->z.get();
    });

    {
        std::unique_lock lk(m);
        cv.wait(lk, [&] { return setup_done; });
    }
    const std::uint64_t durable_before =
        __atomic_load_n(&st.header->checkpoint_ts, __ATOMIC_ACQUIRE);
    REQUIRE(st.durable_checkpoint() == durable_before);
    policy.arm(&st.header->checkpoint_ts);
    std::thread a([&] { st.checkpoint(st.admin_ctx); }); // stalls after storing the new CT
    REQUIRE(policy.wait_stalled(std::chrono::seconds(10)));
    // The header word now holds a CT that covers the free, but it is not durable.
    CHECK(__atomic_load_n(&st.header->checkpoint_ts, __ATOMIC_ACQUIRE) > durable_before);
    CHECK(st.durable_checkpoint() == durable_before);
    {
        std::lock_guard lk(m);
        go = true;
        cv.notify_all();
    }
    b.join(); // B's transaction returned: it must survive any crash from here on

    // The crash image: the file as it is, with the CT line at its last durable value.
    auto image = tlptm_test::read_file(path);
    std::memcpy(image.data() + ct_offset, &durable_before, sizeof durable_before);
    policy.release();
    a.join();
    const auto z_offset =
        reinterpret_cast<std::uint8_t*>(z) - static_cast<std::uint8_t*>(pool.base());
    INFO("B's new block ", (z == x ? "reused the freed block" : "is another block"));
    pool.close();
    tlptm_test::write_file(path, image);

    auto opt2 = tlptm_test::small_options();
    auto again = tlptm::pool::open(path, opt2);
    auto* z_after = reinterpret_cast<blob*>(static_cast<std::uint8_t*>(again.base()) + z_offset);
    CHECK(again.root<root>()->z.get() == z_after);
    CHECK(z_after->value.get() == new_value); // before the fix: old_value came back
}
